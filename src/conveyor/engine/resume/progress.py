"""One progress seam: how each kind of data keeps, ships and resumes its place in an epoch.

Chosen once, when an iterator is built, as `WorkerKind` is (`progress_for`); the
iterators ask it and never which kind of data they load:

- `IndexProgress`: map-style data; the epoch's order is indices, so the place is a count
  (and, ``in_order=False``, the positions delivered ahead). Workers send no state.
- `DatasetStateProgress`: map-style data with a ``state_dict()`` of its own (an RNG its
  ``__getitem__`` draws from), ``in_order``: each worker's dataset state too, with every
  batch; resumed per worker on the same topology.
- `StreamProgress`: streams; each worker's stream state (every batch, or as
  ``snapshot_every_n_steps`` says) and the batches since; resumed per worker, or merged
  and split again on another topology (`conveyor.state.elastic`).
- `PlacedProgress`: a dataset whose global positions the loader splits (`Mixture`): one
  position for the whole run, no worker state shipped.

Each owns its state's shape (what it adds to the loader's checkpoint), its shipping
policy (what workers send with their batches: `ShippingPolicy`) and its resume (what
each worker, or the single-process fetcher, loads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from conveyor.engine.resume.placed import PlacedRun, is_placed
from conveyor.state import stream_state
from conveyor.state.loader_state import (
    DeliveryLog,
    LoaderStateDict,
    Resume,
    StreamResume,
    WorkerStreams,
    map_dataset_resume,
    stream_resume_for,
)
from conveyor.state.protocol import has_state

__all__ = [
    "DatasetStateProgress",
    "Deliveries",
    "IndexProgress",
    "PlacedProgress",
    "Progress",
    "ShippingPolicy",
    "StateCadence",
    "StreamProgress",
    "progress_for",
]


class ShippingPolicy(NamedTuple):
    """What workers send with their batches: the dataset's state with every ``every``-th
    batch (0: none), and with the end of their stream (``at_end``)."""

    every: int
    at_end: bool


class Deliveries(NamedTuple):
    """What a multi-worker epoch has delivered, as a checkpoint records it."""

    log: DeliveryLog  # counts, watermark and what came ahead of it
    states: list[Any]  # each worker's dataset state (plain data, unpacked)
    num_workers: int
    active: list[bool]  # workers whose stream still has batches to deliver
    next_worker: int  # the worker whose batch the user receives next
    in_order: bool


class StateCadence:
    """Which items carry the state (a worker's batches, an offloaded pipe's items): every
    ``every``-th (0: none), and the end of the stream whenever ``at_end``. Between, the
    consumer counts the items since the last state, which a resume reads again."""

    def __init__(self, at_end: bool, every: int) -> None:
        self.stateful = at_end
        self.every = every if at_end else 0
        self._answered = 0

    def restart(self) -> None:
        self._answered = 0

    def now(self) -> bool:
        """Whether the item just produced carries the state (counts it)."""
        self._answered += 1
        return self.every > 0 and self._answered % self.every == 0


def state_every(snapshot_every_n_steps: int | None, num_workers: int) -> int:
    """Every how many of its batches a worker sends its stream's state (0: never).

    torchdata's ``snapshot_every_n_steps``: the workers' states reach the main process
    about once in that many steps (``None``, conveyor's default, and 1: with every batch);
    between, the main process counts the batches delivered since, which a resume reads
    again, so every step's checkpoint is still exact."""
    if snapshot_every_n_steps is None:
        return 1
    if snapshot_every_n_steps == 0:
        return 0
    return max(1, snapshot_every_n_steps // max(1, num_workers))


class Progress:
    """The seam: what an iterator asks of its data's progress. The defaults are map-style
    data's (`IndexProgress`); each strategy overrides what its kind does otherwise."""

    counts_samples = True  # the checkpoint's ``samples`` follow from its batches

    def shipping(self, snapshot_every_n_steps: int | None, num_workers: int) -> ShippingPolicy:
        return ShippingPolicy(0, False)

    def worker_resume(
        self, resume: Resume | None, num_workers: int, world: tuple[int, int]
    ) -> StreamResume | None:
        return None

    def delivered(self, deliveries: Deliveries) -> dict[str, Any]:
        """The checkpoint's record of what the workers delivered."""
        if deliveries.in_order:
            return {}
        log = deliveries.log  # out of order: a watermark and what came ahead of it
        return {"yielded": log.watermark, "delivered_ahead": sorted(log.ahead)}

    def workers_at_end(self, final: list[Any], dataset: Any) -> WorkerStreams | None:
        """Persistent workers: what each starts the next epoch from (None: nothing)."""
        return None

    def alone_at_end(self, state: Any, dataset: Any) -> Any:
        """Without workers: the dataset's state the next epoch starts from (None: none)."""
        return None

    def resume_alone(
        self,
        restore: Callable[[Any], bool],
        resume: Resume,
        world: tuple[int, int],
        replay: Callable[[int], None],
    ) -> None:
        """Without workers: load the checkpoint's dataset state (a map-style dataset's own)."""
        saved = resume.state.get("dataset")
        if saved is not None:
            restore(saved)

    def rebatches(self, state: LoaderStateDict, change: str) -> bool:
        """Whether a changed batch size is honoured by re-batching the epoch's indices."""
        return True

    def placed_run(
        self, resume: Resume | None, num_yielded: int, data: Any, world_size: int
    ) -> PlacedRun | None:
        return None

    def next_run(self, dataset: Any) -> dict[str, Any] | None:
        """What a placed run's next epoch starts from (None: not placed)."""
        return None


class IndexProgress(Progress):
    """Map-style data: the place in the epoch is how many index requests were delivered."""


class DatasetStateProgress(IndexProgress):
    """Map-style data with its own state: each worker's, after its last delivered batch."""

    def shipping(self, snapshot_every_n_steps: int | None, num_workers: int) -> ShippingPolicy:
        return ShippingPolicy(1, True)

    def worker_resume(
        self, resume: Resume | None, num_workers: int, world: tuple[int, int]
    ) -> StreamResume | None:
        return map_dataset_resume(num_workers, resume, world)

    def delivered(self, deliveries: Deliveries) -> dict[str, Any]:
        return {"workers": _workers_state(deliveries)}

    def workers_at_end(self, final: list[Any], dataset: Any) -> WorkerStreams | None:
        return _fresh_workers(final)

    def alone_at_end(self, state: Any, dataset: Any) -> Any:
        return state


class StreamProgress(DatasetStateProgress):
    """Streams: each worker's stream state and the batches it delivered since."""

    counts_samples = False  # batch sizes of a stream's end are its own

    def shipping(self, snapshot_every_n_steps: int | None, num_workers: int) -> ShippingPolicy:
        return ShippingPolicy(state_every(snapshot_every_n_steps, num_workers), True)

    def worker_resume(
        self, resume: Resume | None, num_workers: int, world: tuple[int, int]
    ) -> StreamResume | None:
        return stream_resume_for(True, num_workers, resume, world)

    def workers_at_end(self, final: list[Any], dataset: Any) -> WorkerStreams | None:
        return _fresh_workers([stream_state.next_epoch_part(dataset, s) for s in final])

    def alone_at_end(self, state: Any, dataset: Any) -> Any:
        return stream_state.next_epoch_part(dataset, state)

    def resume_alone(
        self,
        restore: Callable[[Any], bool],
        resume: Resume,
        world: tuple[int, int],
        replay: Callable[[int], None],
    ) -> None:
        """Seek with the stream's own state when it has one (merged from another topology
        if need be); otherwise read and drop what was delivered, as torch users must."""
        streams = stream_resume_for(True, 0, resume, world)  # None: same topology
        saved = resume.state.get("dataset")
        if streams is not None and streams.states[0] is not None:
            saved = streams.states[0]
        if not restore(saved):
            replay(resume.yielded)

    def rebatches(self, state: LoaderStateDict, change: str) -> bool:
        _check_stream_rebatch(state, change)
        return False  # each stream continues from its own state, in batches of any size


class PlacedProgress(StreamProgress):
    """A dataset whose positions the loader splits: one position for the whole run."""

    def shipping(self, snapshot_every_n_steps: int | None, num_workers: int) -> ShippingPolicy:
        return ShippingPolicy(0, False)  # the main process knows the position

    def placed_run(
        self, resume: Resume | None, num_yielded: int, data: Any, world_size: int
    ) -> PlacedRun | None:
        saved = resume.state.get("elastic") if resume is not None else None
        start = int(saved["position"]) if isinstance(saved, dict) else 0
        return PlacedRun(start, num_yielded, data.samples_per_request, world_size)

    def next_run(self, dataset: Any) -> dict[str, Any] | None:
        return {"elastic": dataset.next_run_state()}  # position 0, with today's weights


def progress_for(data: Any, in_order: bool, num_workers: int) -> Progress:
    """The progress strategy for a loader's data (``DataOptions``) and ordering."""
    if data.iterable_style:
        return PlacedProgress() if is_placed(data.dataset) else StreamProgress()
    if has_state(data.dataset) and (in_order or num_workers == 0):
        return DatasetStateProgress()
    return IndexProgress()


def _workers_state(deliveries: Deliveries) -> WorkerStreams:
    return {
        "num_workers": deliveries.num_workers,
        "states": list(deliveries.states),
        "counts": list(deliveries.log.counts),
        "active": list(deliveries.active),
        "next_worker": deliveries.next_worker,
    }


def _fresh_workers(states: list[Any]) -> WorkerStreams | None:
    if all(state is None for state in states):
        return None
    count = len(states)
    return {
        "num_workers": count,
        "states": states,
        "counts": [0] * count,
        "active": [True] * count,
        "next_worker": 0,
    }


def _check_stream_rebatch(state: LoaderStateDict, change: str) -> None:
    """A stream is resumed by reading and dropping the batches delivered after its last
    state (all, without one), which counts batches of the checkpoint's size: with another
    size that would be wrong."""
    workers = state.get("workers")
    if state.get("elastic") is not None:
        return  # merged progress: every stream seeks
    if workers is None:
        replays = state.get("dataset") is None and int(state.get("yielded", 0)) > 0
    else:
        replays = any(count > 0 for count in workers["counts"])
    if replays:
        raise ValueError(
            f"this checkpoint of an iterable-style dataset cannot be resumed with another "
            f"batching ({change}): resuming re-reads and drops the batches delivered after "
            "the workers' last state (all of them: a dataset with no state_dict()), "
            "counted in the checkpoint's batch size; resume with that batch_size, or give "
            "the dataset state_dict()/load_state_dict() and keep snapshot_every_n_steps=1"
        )
