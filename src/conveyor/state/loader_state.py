"""What a DataLoader checkpoint holds, and how an epoch's start is captured and replayed.

An epoch is replayed, never re-read: the checkpoint keeps the random-number state from
*before* the epoch drew anything (its seeds, its shuffle) and how many batches the user
received. Resuming restores that state, lets the epoch draw the same seeds and the same
shuffle again, and skips the indices already delivered without loading any data. For
streams (iterable-style datasets, DataPipes) it keeps each worker's dataset state as of
the last batch the user received from it, as plain data (`conveyor.state.plain`): a
checkpoint never holds a pickle, and loading one never runs code.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple, TypedDict

import torch

from conveyor.state.elastic import is_elastic
from conveyor.state.legacy import check_legacy
from conveyor.state.protocol import has_state
from conveyor.state.stream_set import merge_any

STATE_VERSION = 2  # 1: worker states were pickles (`conveyor.state.legacy`)


class WorkerStreams(TypedDict):
    """Streams read by workers: each worker's dataset state and the round-robin cursor."""

    num_workers: int
    states: list[Any]  # per worker: the dataset's state (plain data) after its last batch
    counts: list[int]  # per worker: batches delivered since its state (all, if it has none)
    active: list[bool]  # False once a worker's stream has ended this epoch
    next_worker: int  # the worker whose batch the user receives next


class LoaderStateDict(TypedDict, total=False):
    version: int
    in_epoch: bool  # False: between epochs (the next iter() starts a fresh epoch)
    generator: torch.Tensor | None  # loader generator state before the epoch drew
    global_rng: torch.Tensor | None  # torch's global RNG state, when no generator was given
    sampler: Any  # the index sampler's own state before the epoch, if it has one
    drew_base_seed: bool  # False: a persistent-workers epoch reusing its first base seed
    base_seed: int
    shared_seed: int | None
    yielded: int  # batches the user received this epoch
    delivered_ahead: list[int]  # in_order=False: positions >= yielded already delivered
    dataset: Any  # single process, streams: the dataset's state
    workers: WorkerStreams | None
    replicas: Any  # DistributedSampler: world size, global progress (engine/resume/rank_resume)
    samples: int | None  # samples of the epoch's order delivered (None: batch sizes vary)
    rebatched: bool  # the epoch's batches were cut from a sample count (batch_size changed)
    fingerprint: Any  # what the checkpoint depends on (state/fingerprint.py)
    topology: Any  # {"world_size", "rank", "worker_type"} of the loader that took it
    elastic: Any  # streams merged by merge_checkpoints: one progress for any topology
    certificate: Any  # {"digest", "samples"} of the epoch so far (state/certificate.py)
    epoch: int  # in an epoch: its number; between epochs: the next one's


class EpochStart:
    """Captured when an epoch starts, before it draws anything."""

    __slots__ = ("generator", "global_rng", "sampler")

    def __init__(
        self, generator: torch.Tensor | None, global_rng: torch.Tensor | None, sampler: Any
    ) -> None:
        self.generator = generator
        self.global_rng = global_rng
        self.sampler = sampler


class Resume(NamedTuple):
    """A checkpoint being applied to the next epoch."""

    state: LoaderStateDict

    @property
    def yielded(self) -> int:
        return int(self.state.get("yielded", 0))


def stateful_sampler(index_sampler: object) -> object:
    """The index sampler, or the sampler inside a BatchSampler, that keeps its own state."""
    if has_state(index_sampler):
        return index_sampler
    inner = getattr(index_sampler, "sampler", None)
    return inner if has_state(inner) else None


def capture_epoch_start(generator: torch.Generator | None) -> EpochStart:
    """Before the epoch's ``iter(sampler)``: one RNG-state copy per epoch, not per call."""
    return EpochStart(
        generator=generator.get_state() if generator is not None else None,
        global_rng=torch.get_rng_state() if generator is None else None,
        sampler=None,
    )


def capture_sampler_start(start: EpochStart, sampler: object) -> None:
    """Right after ``iter(sampler)``: a stateful sampler's state at position 0."""
    if has_state(sampler):
        start.sampler = sampler.state_dict()  # type: ignore[attr-defined]


def restore_epoch_start(
    state: LoaderStateDict, generator: torch.Generator | None, sampler: object
) -> None:
    """Put the RNGs (and a stateful sampler) back where the checkpointed epoch began.

    The epoch's order comes from the loader's generator if it has one, else from torch's
    global RNG (``load_state_dict`` refused a checkpoint of the other kind: `check_generator`).
    """
    saved_generator = state.get("generator")
    if generator is not None and saved_generator is not None:
        generator.set_state(saved_generator)
    saved_global = state.get("global_rng")
    if generator is None and saved_global is not None:
        torch.set_rng_state(saved_global)
    saved_sampler = state.get("sampler")
    if saved_sampler is not None and has_state(sampler):
        sampler.load_state_dict(saved_sampler)  # type: ignore[attr-defined]


def check_generator(state: LoaderStateDict, generator: torch.Generator | None) -> None:
    """ValueError when an in-epoch checkpoint's order came from another RNG than this
    loader's (its own generator against torch's global one)."""
    if not state.get("in_epoch"):
        return
    saved_generator = state.get("generator")
    if (saved_generator is not None) != (generator is not None):
        had = "a generator" if saved_generator is not None else "no generator"
        has = "one" if generator is not None else "none"
        raise ValueError(
            f"this checkpoint cannot be resumed here: it was taken by a DataLoader with {had} "
            f"(generator=...) and this one has {has}, so the epoch's order (shuffle, seeds) "
            "would not be the same; create the loader with generator= as when it was saved"
        )


def check_version(state: LoaderStateDict) -> None:
    version = state.get("version")
    if version == 1:
        check_legacy(state)  # plain version-1 states read as they are; pickled ones refused
        return
    if version != STATE_VERSION:
        raise ValueError(
            f"DataLoader state_dict has version {version!r}; this conveyor reads version "
            f"{STATE_VERSION}. Was it saved by a different library or release?"
        )


class DeliveryLog:
    """What the user has received this epoch, as a checkpoint must record it.

    Streams: each worker's dataset state as of the last delivered batch that carried one
    (every batch by default; every n-th with ``snapshot_every_n_steps``), and how many of
    its batches were delivered since (a resume reads them again). Map-style with
    ``in_order=False``: the positions delivered, as a watermark (every position below it)
    plus the ones delivered ahead of it.
    """

    def __init__(self, num_workers: int, watermark: int, ahead: set[int]):
        self.states: list[Any] = [None] * num_workers
        self.end_states: list[Any] = [None] * num_workers  # after StopIteration
        self.counts = [0] * num_workers
        self.watermark = watermark
        self.ahead = set(ahead)

    def ended(self, worker_id: int, state: Any) -> None:
        """The worker's stream ran out; ``state``: its dataset's state after that."""
        if state is not None:
            self.end_states[worker_id] = state

    def final_states(self) -> list[Any]:
        """Each stream's state once the epoch is over (its end, else its last batch)."""
        return [
            e if e is not None else s for e, s in zip(self.end_states, self.states, strict=True)
        ]

    def delivered(self, worker_id: int, position: int, state: Any) -> None:
        if state is not None:
            self.states[worker_id] = state
            self.counts[worker_id] = 0
        else:
            self.counts[worker_id] += 1
        if position != self.watermark:
            self.ahead.add(position)
            return
        self.watermark += 1
        while self.watermark in self.ahead:
            self.ahead.discard(self.watermark)
            self.watermark += 1


class StreamResume(NamedTuple):
    """How each worker of a resumed stream picks up: state to load, or batches to drop."""

    states: tuple[Any, ...]  # each worker's dataset state (plain data) or None
    counts: tuple[int, ...]  # batches each worker delivered after that state (or in all)
    active: tuple[bool, ...]
    next_worker: int

    @property
    def skips(self) -> tuple[int, ...]:
        """Batches each worker reads and drops after loading its state: those delivered
        since the state was taken (all it delivered, for a dataset without state)."""
        return self.counts


def stream_resume_for(
    iterable_style: bool,
    num_workers: int,
    resume: Resume | None,
    world: tuple[int, int] = (1, 0),
) -> StreamResume | None:
    """Check that a stream checkpoint fits this loader's workers and unpack it.

    Same topology (workers, world size, rank): each worker continues its own stream.
    Another topology: the streams' progress is merged into one (`conveyor.state.elastic`)
    that every new worker loads and splits again; a stream whose state cannot be merged
    is a ValueError naming what changed. ``world``: this process's (world size, rank).
    """
    if resume is None or not iterable_style or not resume.state.get("in_epoch"):
        return None
    state = resume.state
    merged = state.get("elastic")
    if merged is None:
        saved = saved_topology(state)
        if saved == (num_workers, *world):
            return _same_topology(state)
        merged = _merged_progress(state, saved, (num_workers, *world))
    if merged is None:  # nothing was delivered: every worker starts afresh
        return None
    slots = max(num_workers, 1)
    return StreamResume(
        states=(merged,) * slots, counts=(0,) * slots, active=(True,) * slots, next_worker=0
    )


def map_dataset_resume(
    num_workers: int, resume: Resume | None, world: tuple[int, int] = (1, 0)
) -> StreamResume | None:
    """A map-style dataset's own state per worker (an RNG ``__getitem__`` draws from):
    each worker loads its own, and tasks go round the workers from where they stopped.

    On another topology no worker's state is its own: they are dropped with a warning (the
    samples are still exactly the rest of the epoch; only the dataset's state is fresh).
    """
    if resume is None or not resume.state.get("in_epoch"):
        return None
    state = resume.state
    workers = state.get("workers")
    if not workers:
        return None
    saved = saved_topology(state)
    if saved != (num_workers, *world):
        warnings.warn(
            "this checkpoint holds the dataset's own state (state_dict()) of each of "
            f"{saved[0]} workers, which do not map onto this loader's {num_workers}: the "
            "rest of the epoch is exact, but each worker's dataset starts from its state as "
            "built",
            stacklevel=4,
        )
        return None
    return StreamResume(
        states=tuple(workers["states"]),
        counts=(0,) * num_workers,
        active=(True,) * num_workers,
        next_worker=int(workers["next_worker"]),
    )


def saved_topology(state: LoaderStateDict) -> tuple[int, int, int]:
    """``(num_workers, world_size, rank)`` of the loader that took a checkpoint."""
    topology = state.get("topology") or {}
    workers = state.get("workers")
    return (
        workers["num_workers"] if workers else 0,
        int(topology.get("world_size", 1)),
        int(topology.get("rank", 0)),
    )


def _same_topology(state: LoaderStateDict) -> StreamResume | None:
    workers = state.get("workers")
    if workers is None:
        return None
    return StreamResume(
        states=tuple(workers["states"]),
        counts=tuple(workers["counts"]),
        active=tuple(workers["active"]),
        next_worker=int(workers["next_worker"]),
    )


def consumer_states(state: LoaderStateDict) -> list[tuple[Any, int]]:
    """Each stream's (state or None, batches delivered after it) in one checkpoint."""
    workers = state.get("workers")
    if workers is None:
        saved = _unstarted_as_none(state.get("dataset"))
        return [(saved, 0 if saved is not None else int(state.get("yielded", 0)))]
    states = [_unstarted_as_none(saved) for saved in workers["states"]]
    return list(zip(states, workers["counts"], strict=True))


def _unstarted_as_none(saved: Any) -> Any:
    """A DataPipe's state before its first pull (``fresh``) says nothing was read."""
    return None if isinstance(saved, dict) and saved.get("fresh") is True else saved


def _why_not_mergeable(streams: Sequence[tuple[Any, int]]) -> str | None:
    """Why these streams' progress cannot be merged into one (None: it can)."""
    if any(lag for _, lag in streams):
        return (
            "its workers' last batches came without their state, so resuming reads them "
            "again: a dataset without state_dict(), or a checkpoint taken with "
            "snapshot_every_n_steps other than 1 (take it with snapshot_every_n_steps=1)"
        )
    if any(saved is not None and not is_elastic(saved) for saved, _ in streams):
        return "its dataset's state is its own consumer's position, not an elastic progress"
    return None


def _merged_progress(
    state: LoaderStateDict, saved: tuple[int, int, int], now: tuple[int, int, int]
) -> Any:
    names = ("num_workers", "world_size", "rank")
    changed = zip(names, saved, now, strict=True)
    field, before, after = next((n, b, a) for n, b, a in changed if b != a)
    where = f"it was taken with {field}={before}, this loader has {field}={after}"
    streams = consumer_states(state)
    why = _why_not_mergeable(streams)
    if why is not None:
        raise ValueError(
            f"this checkpoint of an iterable-style dataset cannot be resumed here: {where}, "
            f"and its stream cannot be re-split ({why}). Resume with the same {field}, or "
            "read it through a stream that resumes on any topology (conveyor.TarShards, "
            "conveyor.ShardedStream)"
        )
    if saved[1] > 1 or now[1] > 1:
        raise ValueError(
            f"this checkpoint holds one rank's streams (rank {saved[2]} of world_size "
            f"{saved[1]}) and cannot be resumed alone here: {where}. Merge the "
            "checkpoints of every rank with conveyor.merge_checkpoints([...]) and load the "
            "result on every rank"
        )
    return merge_any([s for s, _ in streams])


def merge_checkpoints(states: Sequence[LoaderStateDict]) -> LoaderStateDict:
    """One checkpoint from the DataLoader checkpoints of every rank, taken at one step.

    For streams that resume on any topology (`conveyor.ShardedStream`): the ranks'
    workers' progress is merged into one, which a loader with any ``num_workers``, worker
    type and world size loads on every rank. Map-style loaders need no merge (any rank's
    checkpoint resumes on another world size); their first checkpoint is returned.

    Args:
        states: every rank's ``loader.state_dict()``, taken at the same step.
    """
    if not states:
        raise ValueError("merge_checkpoints: no checkpoints given")
    first = states[0]
    fingerprint = first.get("fingerprint") or {}
    if not first.get("in_epoch") or fingerprint.get("dataset") != "iterable":
        return dict(first)  # type: ignore[return-value]
    world = saved_topology(first)[1]
    ranks = sorted(saved_topology(state)[2] for state in states)
    if ranks != list(range(world)):
        raise ValueError(
            f"merge_checkpoints needs one checkpoint of each of the {world} ranks "
            f"(world_size={world}), got ranks {ranks}"
        )
    streams = [stream for state in states for stream in consumer_states(state)]
    why = _why_not_mergeable(streams)
    if why is not None:
        raise ValueError(
            f"merge_checkpoints: these streams cannot be merged ({why}); read them through "
            "a stream that resumes on any topology (conveyor.TarShards, conveyor.ShardedStream)"
        )
    merged: LoaderStateDict = dict(first)  # type: ignore[assignment]
    merged["elastic"] = merge_any([saved for saved, _ in streams])
    merged["workers"] = None
    merged["dataset"] = None
    merged["topology"] = None
    return merged


def between_epochs_state(
    generator: torch.Generator | None, index_sampler: object, epoch: int
) -> LoaderStateDict:
    """A checkpoint between two epochs: the loader's generator where the last epoch left it
    and, for a sampler that draws from its own generator (torchdata's RandomSampler), where
    its next epoch starts; others start each epoch afresh."""
    state: LoaderStateDict = {
        "version": STATE_VERSION,
        "in_epoch": False,
        "generator": generator.get_state() if generator is not None else None,
        "epoch": epoch,  # the next epoch's number
    }
    next_epoch_state = getattr(index_sampler, "next_epoch_state", None)
    if callable(next_epoch_state):
        state["sampler"] = next_epoch_state()
    return state


def next_epoch_resume(
    state: LoaderStateDict, num_workers: int, world: tuple[int, int]
) -> Resume | None:
    """A checkpoint taken between epochs that carries the streams' states at the end of
    the epoch: the next epoch starts from them (a dataset that counts its epochs, say),
    as an epoch resumed at its first batch. None if it carries none.

    On another topology the states (one per old worker) fit no new worker: they are
    dropped with a warning, and the next epoch starts from the datasets as built.
    """
    elastic = state.get("elastic")  # e.g. a Mixture's next run: any topology takes it
    kept_seed = state.get("drew_base_seed") is False and "base_seed" in state
    has_streams = state.get("dataset") is not None or bool(state.get("workers"))
    if not has_streams and elastic is None and not kept_seed:
        return None
    saved = saved_topology(state)
    if has_streams and elastic is None and saved != (num_workers, *world):
        names = ("num_workers", "world_size", "rank")
        field, before, after = next(
            (n, b, a) for n, b, a in zip(names, saved, (num_workers, *world), strict=True) if b != a
        )
        warnings.warn(
            "this checkpoint, taken between epochs, holds each stream's dataset state at the "
            f"end of the epoch for {field}={before}; this loader has {field}={after}, so the "
            "next epoch starts from the dataset as constructed (its own state not restored)",
            stacklevel=3,
        )
        if not kept_seed:
            return None
        state = {**state, "dataset": None, "workers": None}
    start: LoaderStateDict = {
        "version": STATE_VERSION,
        "in_epoch": True,
        "generator": state.get("generator"),
        "global_rng": None,
        "sampler": None,
        "drew_base_seed": not kept_seed,  # persistent workers keep their first base seed
        "shared_seed": None,
        "yielded": 0,
        "delivered_ahead": [],
        "dataset": state.get("dataset"),
        "workers": state.get("workers"),
        "topology": state.get("topology"),
    }
    if kept_seed:
        start["base_seed"] = int(state["base_seed"])
    if elastic is not None:
        start["elastic"] = elastic
    return Resume(start)
