"""What single- and multi-worker iterators share: counting, the IterableDataset len check."""

from __future__ import annotations

import itertools
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from conveyor.distributed import world_and_rank
from conveyor.engine.loop.plan import LoadPlan
from conveyor.engine.loop.skips import SkipLog
from conveyor.engine.resume.placed import PlacedRun
from conveyor.engine.resume.progress import progress_for
from conveyor.engine.resume.rank_resume import (
    apply_replica_resume,
    distributed_sampler,
    replica_state,
)
from conveyor.engine.workers.pin_thread import PIN_THREAD_NAME, warn_unpinnable
from conveyor.engine.workers.request_deltas import take_request_counts
from conveyor.engine.workers.seeding import draw_base_seed
from conveyor.formats.skips import SkipRecord
from conveyor.sampler import BatchSampler
from conveyor.state.certificate import Certificate, digest_identities
from conveyor.state.fingerprint import fingerprint_of
from conveyor.state.loader_state import (
    STATE_VERSION,
    LoaderStateDict,
    Resume,
    between_epochs_state,
    capture_epoch_start,
    capture_sampler_start,
    restore_epoch_start,
    stateful_sampler,
)
from conveyor.stats.counters import StepClock
from conveyor.torch_compat import TorchLoaderIter
from conveyor.transport.pinning import pin_memory, pin_memory_available


class LoaderIterator(TorchLoaderIter):
    """Iterator over one epoch (persistent workers: over every epoch, see ``reset``).

    Subclasses implement ``_next_data``. ``len_hint`` is the length the user saw from
    ``len(loader)`` on an IterableDataset; exceeding it warns, as torch does. A subclass
    of torch's ``_BaseDataLoaderIter`` (none of its code runs), as
    ``conveyor.dataloader._BaseDataLoaderIter``: code that recognises a loader's iterator
    by torch's class (Lightning leaves it out of pickles) sees conveyor's too.
    """

    def __init__(
        self,
        plan: LoadPlan,
        len_hint: Callable[[], int | None],
        resume: Resume | None = None,
    ):
        self._options = options = plan.options
        self._data = options.data
        self._hooks = plan.hooks
        self._len_hint = len_hint
        self._pin: Callable[[Any], Any] | None = None
        pin = options.pin
        if pin.enabled and pin_memory_available(pin.device):
            self._pin = self._timed_pin(pin.device or None)
        elif pin.enabled:
            warn_unpinnable()  # as torch does, with or without workers; loading carries on
        self._fingerprint = fingerprint_of(self._data)
        workers = options.workers
        # how this kind of data keeps, ships and resumes its place: chosen once
        self._progress = progress_for(self._data, workers.in_order, workers.num_workers)
        self.world = world_and_rank()  # (world size, rank) the checkpoints record
        self.epoch = plan.epoch  # the loader's epoch number (checkpoints keep it)
        self._begin_epoch(resume, draw_base_seed_now=True)

    def _timed_pin(self, device: str | None) -> Callable[[Any], Any]:
        """The pin function, timed into the epoch's clock (the doctor reads the pin stage's
        busy time from it); it runs in the pin thread or in ``next()``. In the pin thread
        the CPU it spent since its last batch (receiving) is counted too: without pinning,
        the loop's own thread would spend it."""
        since = [-1.0]  # the pin thread's CPU clock when its last batch was pinned
        owner = weakref.ref(self)  # the pin thread must not keep this iterator alive

        def pin(data: Any) -> Any:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return pin_memory(data, device)
            finally:
                now = time.thread_time()
                in_thread = threading.current_thread().name == PIN_THREAD_NAME
                receive = cpu - since[0] if in_thread and since[0] >= 0 else 0.0
                since[0] = now
                iterator = owner()
                if iterator is not None:
                    iterator.clock.pinned(time.perf_counter() - started, receive)

        return pin

    # ------------------------------------------------------------------ epochs
    def _begin_epoch(self, resume: Resume | None, draw_base_seed_now: bool) -> None:
        """Start an epoch: RNG snapshot, sampler iterator, seeds, then skip what a
        checkpoint says was delivered. Draw order is torch's: iter(sampler), shared
        seed, base seed, then the sampler's own draws on its first ``next``."""
        data = self._data
        index_sampler, generator = data.index_sampler, data.generator
        self._replicas = distributed_sampler(index_sampler)
        self._consumed_before, skip_delivered = 0, True
        self._samples_before: int | None = 0  # rebatched epochs: samples before the resume
        rebatch_from: int | None = None
        if resume is not None:  # checked once, by the loader's load_state_dict
            restore_epoch_start(resume.state, generator, stateful_sampler(index_sampler))
            draw_base_seed_now = resume.state.get("drew_base_seed", True)
            self._consumed_before, skip_delivered = apply_replica_resume(
                self._replicas, resume, data.samples_per_request
            )
            if skip_delivered:
                rebatch_from = self._rebatch_point(resume)
        self._epoch_start = capture_epoch_start(generator)
        if rebatch_from is None:
            self._sampler_iter = iter(index_sampler)
        else:
            self._sampler_iter = _batches_after(
                data.sampler, rebatch_from, data.batch_size, data.drop_last
            )
            self._samples_before, skip_delivered = rebatch_from, False
        capture_sampler_start(self._epoch_start, stateful_sampler(index_sampler))
        self._position = 0  # index requests taken from the sampler this epoch
        self._num_yielded = 0
        self._shared_seed = self._draw_shared_seed()
        self._drew_base_seed = draw_base_seed_now
        if draw_base_seed_now:
            # torch draws this even without workers; drawing it here keeps the
            # generator's stream, and so every shuffle, identical to torch's.
            self._base_seed = draw_base_seed(generator)
            if self._shared_seed is not None and self._options.workers.num_workers > 0:
                # torch's multi-worker iterator draws a DataPipe graph's shared seed once
                # more as it starts (its first `_reset`), and no worker uses that one:
                # drawn here too, so every later epoch's seeds are torch's.
                draw_base_seed(generator)
        elif resume is not None:
            self._base_seed = int(resume.state["base_seed"])
        self._skip: set[int] = set()
        self.finished = False
        self.clock = StepClock()
        self._skips = SkipLog(self._options.errors.max_skipped)
        self._samples_per_batch = data.samples_per_request
        self._batch_samples = 0  # samples in the batch _next_data returned last
        self._batch_digest: tuple[int, int] | None = None  # and their identities' digest
        saved = resume.state.get("certificate") if resume is not None else None
        self.certificate = Certificate.from_state(saved)  # what this epoch delivered
        self.clock.certificate = (self.certificate.hex, self.certificate.samples)
        if resume is not None and skip_delivered:
            self._skip_delivered(resume)
        # a dataset whose positions the loader splits (`conveyor.engine.resume.placed`)
        self._placed_run = self._progress.placed_run(resume, self._num_yielded, data, self.world[0])

    def _rebatch_point(self, resume: Resume) -> int | None:
        """Samples to skip when the checkpoint's batches are not this loader's (its
        ``batch_size`` changed, or its epoch was already re-batched); None otherwise."""
        state, data = resume.state, self._data
        saved = state.get("fingerprint")
        if saved is None:
            return None
        if saved.get("batch_size") == data.batch_size and not state.get("rebatched"):
            return None
        change = f"batch_size {saved.get('batch_size')!r} -> {data.batch_size!r}"
        if not self._progress.rebatches(state, change):
            return None
        samples = state.get("samples")
        if (
            samples is None
            or data.batch_size is None
            or type(data.batch_sampler) is not (BatchSampler)
        ):
            raise ValueError(
                f"this checkpoint cannot be resumed with another batching ({change}): "
                "re-batching the rest of an epoch needs batch_size on both loaders (not a "
                "batch_sampler of your own); resume with the checkpoint's batch_size"
            )
        if state.get("delivered_ahead"):
            raise ValueError(
                f"this checkpoint cannot be resumed with another batching ({change}): it was "
                f"taken with in_order=False and {len(state['delivered_ahead'])} batch(es) "
                "delivered ahead of the others; resume with the checkpoint's batch_size"
            )
        return int(samples)

    def _skip_delivered(self, resume: Resume) -> None:
        for _ in range(resume.yielded):
            try:
                next(self._sampler_iter)
            except StopIteration:
                break
            self._position += 1
        self._num_yielded = resume.yielded
        self._skip = set(resume.state.get("delivered_ahead", ()))

    def state_dict(self) -> LoaderStateDict:
        """Where the user is in this epoch: cheap (no copies), called between batches."""
        state = self._epoch_state()
        placed = self._placed_run
        if placed is not None:  # one position for the whole run: any topology resumes it
            position = placed.position(self._num_yielded)
            state["elastic"] = self._data.dataset.state_at(position)
            state["workers"] = None
            state["dataset"] = None
        state["fingerprint"] = self._fingerprint
        state["rebatched"] = self._samples_before != 0
        state["samples"] = self._samples_delivered(int(state.get("yielded", 0)))
        return state

    def _samples_delivered(self, batches: int) -> int | None:
        """Samples of the epoch's order in its first ``batches`` batches after the resume
        point (None when batch sizes vary: a batch_sampler of the user's)."""
        data = self._data
        if not self._progress.counts_samples or self._samples_before is None:
            return None
        if data.batch_sampler is None:
            return self._samples_before + batches
        if type(data.batch_sampler) is not BatchSampler or data.batch_size is None:
            return None
        total = self._samples_before + batches * data.batch_size
        try:
            return min(total, len(data.sampler))  # type: ignore[arg-type]
        except TypeError:  # a sampler without len
            return total

    def _epoch_state(self) -> LoaderStateDict:
        start = self._epoch_start
        return {
            "version": STATE_VERSION,
            "in_epoch": True,
            "generator": start.generator,
            "global_rng": start.global_rng,
            "sampler": start.sampler,
            "drew_base_seed": self._drew_base_seed,
            "base_seed": self._base_seed,
            "shared_seed": self._shared_seed,
            "yielded": self._num_yielded,
            "delivered_ahead": [],
            "dataset": None,
            "workers": None,
            "replicas": replica_state(
                self._replicas, self._samples_per_batch, self._consumed_before
            ),
            "topology": {"world_size": self.world[0], "rank": self.world[1]},
            "certificate": self.certificate.state(),
            "epoch": self.epoch,
        }

    def _certify(self) -> None:
        """Fold the batch just delivered into the epoch's certificate: by its samples'
        identities, or (a stream that names none) by their positions in the epoch."""
        part = self._batch_digest
        if part is None:
            first, count = self.certificate.samples, self._batch_samples
            part = digest_identities(range(first, first + count)), count
        self.certificate = self.certificate.add(part)
        self.clock.certificate = (self.certificate.hex, self.certificate.samples)

    def _next_request(self) -> tuple[int, Any]:
        """The next ``(position, request)`` of this epoch; raises StopIteration at the end."""
        while True:
            request = next(self._sampler_iter)
            position = self._position
            self._position += 1
            if position not in self._skip:
                return position, request
            self._skip.discard(position)

    def __iter__(self) -> LoaderIterator:
        return self

    def __len__(self) -> int:
        return len(self._data.index_sampler)  # type: ignore[arg-type]

    def __getstate__(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} cannot be pickled")

    keep_state_when_dropped: Callable[[LoaderStateDict], None] | None = None
    """Set by the loader: receives this epoch's state when the iterator is dropped before
    the epoch ended (``break``), so ``loader.state_dict()`` still says where you stopped."""

    def __del__(self) -> None:
        keep = self.keep_state_when_dropped
        if keep is None or getattr(self, "finished", True):
            return
        try:
            keep(self.state_dict())
        except Exception:  # a half-built iterator: nothing was delivered from it
            return

    def _next_data(self) -> Any:
        raise NotImplementedError

    _ended_early = False
    _placed_run: PlacedRun | None = None

    def _stream_end(self) -> dict[str, Any] | None:
        """``{"dataset": ...}`` or ``{"workers": ...}``: what of each stream's (or map-style
        dataset's) state at the end of the epoch the next epoch starts from (their own part,
        never an iterator's: `stream_state.next_epoch_part`); None if nothing."""
        return None

    def _reuses_base_seed(self) -> bool:
        """Whether the next epoch keeps this one's workers, and so their base seed."""
        return False

    def _keep_epoch_end(self) -> None:
        """Hand the loader the between-epochs checkpoint: what the next epoch starts from
        (streams' and datasets' end states, a persistent base seed, a placed run's start)."""
        keep = self.keep_state_when_dropped
        if keep is None or self._ended_early:
            return
        end = self._progress.next_run(self._data.dataset) or self._stream_end() or {}
        if self._reuses_base_seed():
            end.update(drew_base_seed=False, base_seed=self._base_seed)
        if not end:
            return
        data = self._data
        state = between_epochs_state(data.generator, data.index_sampler, self.epoch + 1)
        state["topology"] = {"world_size": self.world[0], "rank": self.world[1]}
        state.update(end)  # type: ignore[typeddict-item]
        keep(state)

    def __next__(self) -> Any:
        clock = self.clock
        entered = clock.enter()
        all_ranks_have = self._hooks.all_ranks_have
        try:
            if all_ranks_have is None:
                data = self._next_data()
            else:
                data = self._next_data_in_step(all_ranks_have)
        except StopIteration:
            clock.requests += take_request_counts()
            if not self.finished:
                self.finished = True
                self._skips.report()
                self._keep_epoch_end()
            raise
        clock.leave(entered, self._batch_samples)
        self._certify()
        clock.requests += take_request_counts()  # this process's: listing, thread workers
        self._num_yielded += 1
        if self._data.iterable_style:
            self._check_len_hint()
        return data

    def _next_data_in_step(self, all_ranks_have: Callable[[bool], bool]) -> Any:
        """fullsync: end the epoch on every rank as soon as one rank has no batch."""
        try:
            data, has = self._next_data(), True
        except StopIteration:
            data, has = None, False
        if not all_ranks_have(has):
            if has:
                self._ended_early = True  # streams stopped mid-way: no end state to keep
                self._end_epoch_early()
            raise StopIteration
        return data

    def _end_epoch_early(self) -> None:
        """Drop what is left of the epoch (fullsync); workers may stop here."""

    def _record_skips(self, skips: tuple[SkipRecord, ...]) -> None:
        if skips:
            self.clock.skipped += self._skips.record(skips)

    def _check_len_hint(self) -> None:
        hint = self._len_hint()
        if hint is not None and self._num_yielded > hint:
            msg = (
                f"Length of IterableDataset {self._data.dataset} was reported to be {hint} "
                f"(when accessing len(dataloader)), but {self._num_yielded} samples have been "
                "fetched. "
            )
            if self._options.workers.num_workers > 0:
                msg += (
                    "For multiprocessing data-loading, this could be caused by not properly "
                    "configuring the IterableDataset replica at each worker: split the stream "
                    "with conveyor.get_worker_info() in __iter__."
                )
            warnings.warn(msg, UserWarning, stacklevel=3)

    def _draw_shared_seed(self) -> int | None:
        """DataPipe graphs: one seed per epoch for all workers and ranks, drawn (as torch
        does) from the loader's generator before the workers' base seed."""
        draw = self._hooks.draw_shared_seed
        return None if draw is None else draw(self._data.generator)

    def reset(self, epoch: int | None = None) -> None:
        """Start epoch ``epoch`` (default: the next) on the same iterator (persistent
        workers keep their seeds)."""
        self.epoch = self.epoch + 1 if epoch is None else epoch
        self._begin_epoch(None, draw_base_seed_now=False)

    def _reset(self, loader: object = None, first_iter: bool = False) -> None:
        """torch's name for `reset`, called by the loader (and by iterators that wrap this
        one, as PyG's) when persistent workers start the next epoch: the loader's epoch
        number, which a checkpoint loaded between epochs may have set."""
        epoch = getattr(loader, "_conveyor_next_epoch", None)
        self.reset(epoch if isinstance(epoch, int) else None)

    def _next_index(self) -> Any:
        """torch's: the next request (index, or list of indices) from the sampler."""
        return self._next_request()[1]


def _batches_after(
    sampler: Any, skip: int, batch_size: int | None, drop_last: bool
) -> Iterator[list[Any]]:
    """The batches of ``sampler``'s order after its first ``skip`` indices: the rest of an
    epoch whose batch size changed. A generator, so ``iter(sampler)`` (and its random draws)
    happens at the first ``next``, where a BatchSampler's would."""
    assert batch_size is not None
    indices = iter(sampler)
    for _ in itertools.islice(indices, skip):
        pass
    while True:
        batch = list(itertools.islice(indices, batch_size))
        if not batch or (drop_last and len(batch) < batch_size):
            return
        yield batch
