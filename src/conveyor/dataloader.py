"""The DataLoader facade: check torch's arguments into one options object, run it on the engine."""

from __future__ import annotations

import copy
import functools
import math
import os  # noqa: F401  # torch's module has it: tests patch conveyor.dataloader.os.cpu_count
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from conveyor.collate import default_collate, default_convert
from conveyor.dataset import Dataset
from conveyor.distributed import (
    RankCollectives,
    warn_if_sampler_does_not_shard,
    world_and_rank,
)
from conveyor.engine.loop.autotune import AutotuneOptions
from conveyor.engine.loop.base_iterator import LoaderIterator
from conveyor.engine.loop.multi_worker import MultiWorkerIterator
from conveyor.engine.loop.options import (
    ErrorOptions,
    LoaderOptions,
    PinOptions,
    check_snapshot_steps,
)
from conveyor.engine.loop.plan import EpochHooks, LoadPlan
from conveyor.engine.loop.single_process import SingleProcessIterator
from conveyor.engine.workers.request_deltas import take_request_counts
from conveyor.engine.workers.seeding import draw_base_seed
from conveyor.engine.workers.shared_records import share_records_default
from conveyor.engine.workers.worker_info import WorkerInfo, get_worker_info
from conveyor.engine.workers.worker_kind import (
    MultiprocessingContext,
    WorkerOptions,
    check_worker_args,
    resolve_context,
)
from conveyor.engine.workers.worker_kinds import resolve_worker_type, worker_kind
from conveyor.loader_args import is_datapipe, resolve_sampling
from conveyor.sampler import Sampler
from conveyor.state.fingerprint import check_fingerprint, check_state_keys, fingerprint_of
from conveyor.state.loader_state import (
    LoaderStateDict,
    Resume,
    between_epochs_state,
    check_generator,
    check_version,
    next_epoch_resume,
    stateful_sampler,
)
from conveyor.state.protocol import has_state
from conveyor.state.save_check import check_loadable, checked_for_save
from conveyor.state.validate import check_loader_state
from conveyor.stats.counters import StepClock
from conveyor.torch_compat import DatasetKind as _DatasetKind
from conveyor.torch_compat import TorchDataLoader, is_iterable_style

if TYPE_CHECKING:
    from conveyor.doctor import DoctorReport
    from conveyor.stats.report import LoaderStats

__all__ = ["DataLoader", "WorkerInfo", "default_collate", "default_convert", "get_worker_info"]

# torch's private names of the iterator classes (Lightning and PyG import them from here
# once their imports point at conveyor); each subclasses torch's class of the same name.
_BaseDataLoaderIter = LoaderIterator
_SingleProcessDataLoaderIter = SingleProcessIterator
_MultiProcessingDataLoaderIter = MultiWorkerIterator

T_co = TypeVar("T_co", covariant=True)

_FROZEN_AFTER_INIT = frozenset(
    ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")
)

# Public attributes kept, as torch keeps them, as plain instance attributes, and where each
# lives in the loader's `LoaderOptions` (concern, field). Setting one after construction
# replaces that concern, which checks itself again; torch's order of assignment.
_OPTION_FIELDS: dict[str, tuple[str, str]] = {
    "dataset": ("data", "dataset"),
    "num_workers": ("workers", "num_workers"),
    "prefetch_factor": ("workers", "prefetch_factor"),
    "pin_memory": ("pin", "enabled"),
    "pin_memory_device": ("pin", "device"),
    "timeout": ("workers", "timeout_s"),
    "worker_init_fn": ("workers", "worker_init_fn"),
    "in_order": ("workers", "in_order"),
    "batch_size": ("data", "batch_size"),
    "drop_last": ("data", "drop_last"),
    "sampler": ("data", "sampler"),
    "batch_sampler": ("data", "batch_sampler"),
    "generator": ("data", "generator"),
    "collate_fn": ("data", "collate_fn"),
    "persistent_workers": ("workers", "persistent_workers"),
    # conveyor's additions
    "on_error": ("errors", "on_error"),
    "max_skipped": ("errors", "max_skipped"),
    "fullsync": ("", "fullsync"),
    "profile_stages": ("", "profile_stages"),
    "snapshot_every_n_steps": ("", "snapshot_every_n_steps"),
    "share_records": ("workers", "share_records"),
    "sample_seed": ("", "sample_seed"),
    "autotune": ("", "autotune"),
}


def _option_value(options: LoaderOptions, name: str) -> Any:
    concern, field = _OPTION_FIELDS[name]
    return getattr(getattr(options, concern) if concern else options, field)


class DataLoader(TorchDataLoader[T_co]):
    """Same as `torch.utils.data.DataLoader`, and a subclass of it (none of its code runs).

    Iterating it yields batches of ``dataset``: indices from the sampler (map-style) or items
    from the stream (iterable-style, DataPipe graphs included), collated, optionally pinned,
    loaded in this process (``num_workers=0``) or by worker processes, threads or Ray
    actors. A worker that dies raises at once with its id, pid and signal instead of
    hanging. ``state_dict()`` / ``load_state_dict()`` checkpoint it anywhere in an epoch;
    ``stats()`` tells whether it is the bottleneck.

    Args:
        dataset: a map-style dataset (``__getitem__``, ``__len__``), an iterable-style one
            (``__iter__``), or a DataPipe graph, conveyor's or torch's own (seeded,
            shuffled and sharded across ranks x workers as torch's loader does).
        batch_size: samples per batch; None turns automatic batching off (each sample is
            converted with ``collate_fn``, default `default_convert`).
        shuffle: reshuffle map-style indices every epoch; for a DataPipe graph, switch its
            shuffle nodes on or off (None leaves them as built). Iterable-style datasets
            take only None or False.
        sampler: the indices to load (a `Sampler` or any iterable); excludes ``shuffle``.
        batch_sampler: lists of indices, one per batch; excludes ``batch_size``,
            ``shuffle``, ``sampler`` and ``drop_last``.
        num_workers: worker processes (or threads, actors) loading batches; 0 loads in this
            process.
        collate_fn: merges a list of samples into a batch (default `default_collate`).
        pin_memory: copy batches into pinned memory (in a background thread) before
            returning them; warns once and carries on without an accelerator.
        drop_last: drop the last, incomplete batch (per worker for iterable-style datasets).
        timeout: seconds to wait for a batch from the workers before raising (0: forever).
        worker_init_fn: called with the worker id in each worker after seeding, before
            loading.
        multiprocessing_context: ``"fork"``, ``"spawn"``, ``"forkserver"`` or a context;
            spawn and forkserver workers are forked from one zygote per loader, which
            imports torch when the loader is built and your script at the first ``iter()``.
        generator: the `torch.Generator` that draws the random sampler's order, the
            workers' base seed and a DataPipe graph's shuffle seed.
        prefetch_factor: batches each worker works ahead (default 2 with workers; 0 keeps
            one in flight instead of hanging).
        persistent_workers: keep the workers (and their dataset replicas) between epochs.
        pin_memory_device: deprecated in torch, which pins for the current accelerator; a
            device of another type means no pinning (with torch's warning).
        in_order: yield batches in sampler order; False yields whichever is ready first.
        worker_type: ``"process"`` (default, torch's behaviour), ``"thread"`` (threads of
            this process: no start-up cost and no transfer, for I/O and GIL-releasing work)
            or ``"ray"`` (Ray actors on the process's Ray cluster, ``ray.init()`` if none;
            the ``ray`` extra; a lost actor or node costs no sample: docs/scaling-out.md).
        worker_method: alias of ``worker_type``; also takes torch's ``"multiprocessing"``.
        fullsync: under torch.distributed, every rank ends the epoch as soon as one rank
            runs out of batches (one gloo all-reduce per batch), so ranks with uneven
            shards run the same number of steps and DDP cannot hang. Extra batches on the
            longer ranks are dropped.
        snapshot_every_n_steps: how often workers send their stream's state to the main
            process (torchdata's meaning). ``None`` (the default) or 1: with every batch.
            ``n``: about once in ``n`` steps; 0: never. Every step's checkpoint stays exact
            either way: the main process counts each worker's batches since its last state,
            and a resume reads those again (so larger values make resuming slower, not
            checkpoints coarser). Map-style datasets are unaffected (their order is indices).
        on_error: ``"raise"`` (torch's behaviour) or ``"skip"``: a sample whose
            ``__getitem__`` raises is left out of its batch and counted (map-style only);
            each epoch that skipped any ends with a `BadSampleWarning` naming them.
        max_skipped: with ``on_error="skip"``, bad samples per epoch at most; past it,
            loading stops with an error.
        profile_stages: DataPipe graphs: time every stage in the workers (~0.4 us per item
            and stage); ``stats().stages`` and ``summary()`` name the slowest stage.
        ray_remote_args: ``worker_type="ray"``: keyword arguments for the actors'
            ``.options()`` (``num_cpus``, ``resources``, ``scheduling_strategy``: the
            actors are spread over the nodes, ``"SPREAD"``, unless it says otherwise).
        max_worker_restarts: ``worker_type="ray"``: lost actors replaced per iterator
            while the cluster has room (default None: up to ``num_workers``; 0: a lost
            worker's tasks go to the survivors).
        share_records: process workers read the dataset's large lists and tuples of plain
            records (str, bytes, int, float, bool, None and tuples of these; 100,000 items
            or more, as the dataset or its attributes) from one read-only shared-memory
            table instead of copying them page by page (pytorch#13246), and spawn workers
            get the table's handle instead of a pickle. The user's objects are not changed;
            a list changed between epochs is seen changed. ``False`` (or the environment
            variable ``CONVEYOR_SHARE_RECORDS=0``) turns it off. See docs/guide/workers.md.
        sample_seed: seeds per-sample generators, ``conveyor.sample_generators()``: draw
            a sample's augmentations from them and they are the same for that sample in
            every run, on any worker count or kind, resumed or not (seeded from
            ``(sample_seed, epoch, index)``). None (the default): off.
        autotune: ``True`` or a ``conveyor.AutotuneOptions``: ``num_workers`` becomes a
            ceiling, and while the epoch runs autotune chooses how many of those workers
            take tasks and how many tasks are in flight, so the loop does not wait at the
            least CPU. The batches, their order and checkpoints are those of the fixed
            loader; ``stats().decisions`` lists the changes. See docs/guide/doctor.md.

    Raises:
        ValueError: for arguments that exclude each other or are out of range, naming the
            argument and what to change (torch's messages where torch has one).
    """

    # Plain instance attributes, as torch's (vars(loader) holds them: Lightning rebuilds
    # loaders from it); `__setattr__` keeps `_conveyor_options` in step with them.
    dataset: Dataset[T_co]
    batch_size: int | None
    sampler: Sampler[Any] | Iterable[Any]
    batch_sampler: Sampler[list[Any]] | Iterable[list[Any]] | None
    drop_last: bool
    collate_fn: Callable[[Any], Any]
    generator: torch.Generator | None
    num_workers: int
    prefetch_factor: int | None
    worker_init_fn: Callable[[int], None] | None
    persistent_workers: bool
    timeout: float
    in_order: bool
    pin_memory: bool
    pin_memory_device: str
    on_error: str
    max_skipped: int | None
    fullsync: bool
    profile_stages: bool
    snapshot_every_n_steps: int | None
    share_records: bool
    sample_seed: int | None
    autotune: bool | AutotuneOptions

    # conveyor's own state; names no subclass is likely to use (PopTorch's loader sets
    # `self._options`, others `_resume`, ...)
    _conveyor_options: LoaderOptions
    __initialized = False

    def __init__(
        self,
        dataset: Dataset[T_co],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler[Any] | Iterable[Any] | None = None,
        batch_sampler: Sampler[list[Any]] | Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[T_co]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: str | MultiprocessingContext | None = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        worker_type: str | None = None,
        worker_method: str | None = None,
        fullsync: bool = False,
        snapshot_every_n_steps: int | None = None,
        on_error: str = "raise",
        max_skipped: int | None = None,
        profile_stages: bool = False,
        ray_remote_args: dict[str, Any] | None = None,
        max_worker_restarts: int | None = None,
        share_records: bool | None = None,
        sample_seed: int | None = None,
        autotune: bool | AutotuneOptions = False,
    ) -> None:
        # Checked in torch's order; each concern checks itself as it is built.
        check_snapshot_steps(snapshot_every_n_steps)
        check_worker_args(num_workers, timeout, prefetch_factor, persistent_workers)
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        workers = WorkerOptions(
            kind=worker_kind(
                resolve_worker_type(worker_type, worker_method, multiprocessing_context),
                ray_remote_args,
                max_worker_restarts,
            ),
            num_workers=num_workers,
            prefetch_factor=prefetch_factor,
            multiprocessing_context=resolve_context(multiprocessing_context, num_workers),
            worker_init_fn=worker_init_fn,
            persistent_workers=persistent_workers,
            timeout_s=timeout,
            in_order=in_order,
            share_records=share_records_default() if share_records is None else share_records,
        )
        errors = ErrorOptions(on_error, max_skipped)
        iterable_style = is_iterable_style(dataset)
        data = resolve_sampling(
            dataset,
            iterable_style,
            batch_size,
            shuffle,
            sampler,
            batch_sampler,
            drop_last,
            generator,
            collate_fn,
        )
        options = LoaderOptions(
            data=data,
            workers=workers,
            pin=PinOptions(pin_memory, pin_memory_device),
            errors=errors,
            fullsync=fullsync,
            profile_stages=profile_stages,
            snapshot_every_n_steps=snapshot_every_n_steps,
            sample_seed=sample_seed,
            autotune=autotune,
        )
        given = {"timeout": timeout, "autotune": autotune}  # kept as given, as torch does
        for name in _OPTION_FIELDS:  # torch's order; set as torch does (subclasses see it)
            setattr(self, name, given.get(name, _option_value(options, name)))
            if name == "worker_init_fn":
                self.multiprocessing_context = workers.multiprocessing_context
            elif name == "in_order":
                self._dataset_kind = (
                    _DatasetKind.Iterable if data.iterable_style else _DatasetKind.Map
                )
        self.__dict__["worker_type"] = workers.kind.name
        self.__dict__["_conveyor_options"] = options
        self.__initialized = True
        self._IterableDataset_len_called: int | None = None
        self._iterator: Any = None
        self._conveyor_collectives = RankCollectives()
        self._conveyor_resume: Resume | None = None
        self._conveyor_warned_unsharded = False
        self._conveyor_persistent: MultiWorkerIterator | None = None
        self._conveyor_epoch: weakref.ReferenceType[LoaderIterator] | None = None
        self._conveyor_epoch_clock: StepClock | None = None
        self._conveyor_epoch_serial = 0
        self._conveyor_next_epoch = 0  # the number of the epoch the next iter() starts
        self._conveyor_dropped_state: LoaderStateDict | None = None
        self.check_worker_number_rationality()
        # spawn/forkserver: the zygote starts importing now; large plain lists become tables
        workers.kind.warm_up(workers, self._shareable_dataset())

    # ------------------------------------------------------------ attributes
    @property
    def multiprocessing_context(self) -> MultiprocessingContext | None:
        return self.__multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, context: str | MultiprocessingContext | None) -> None:
        options = self.__dict__.get("_conveyor_options")
        if options is None:  # in __init__: checked there already
            self.__multiprocessing_context = context  # type: ignore[assignment]
            return
        resolved = resolve_context(context, self.num_workers)
        options = options.changed("workers", multiprocessing_context=resolved)
        self.__dict__["_conveyor_options"] = options
        self.__multiprocessing_context = resolved
        options.workers.kind.warm_up(options.workers, self._shareable_dataset())

    __multiprocessing_context: MultiprocessingContext | None

    @property
    def worker_type(self) -> str:
        """``"process"``, ``"thread"`` or ``"ray"``: the kind of this loader's workers."""
        return self._conveyor_options.workers.kind.name

    @worker_type.setter
    def worker_type(self, name: str) -> None:
        old = self._conveyor_options.workers.kind
        self._conveyor_options = self._conveyor_options.changed("workers", kind=worker_kind(name))
        self.__dict__["worker_type"] = name
        old.close()

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__initialized and name in _FROZEN_AFTER_INIT:
            raise ValueError(
                f"{name} attribute should not be set after {type(self).__name__} is initialized"
            )
        where = _OPTION_FIELDS.get(name)
        options = self.__dict__.get("_conveyor_options")
        if where is not None and options is not None:
            concern, field = where
            self.__dict__["_conveyor_options"] = options.changed(concern, **{field: value})
        object.__setattr__(self, name, value)  # not torch's __setattr__

    def __getstate__(self) -> dict[str, Any]:
        """As torch's: the attributes. The last epoch's bookkeeping (a weak reference to
        its iterator) stays behind; a persistent iterator travels as torch's would."""
        state = self.__dict__.copy()
        state["_conveyor_epoch"] = None
        state["_conveyor_epoch_clock"] = None
        return state

    def _shareable_dataset(self) -> Any:
        """The dataset, whose large plain lists workers may read from shared tables; None
        for a DataPipe graph (its nodes are prepared per worker, not shared)."""
        return None if is_datapipe(self.dataset) else self.dataset

    def check_worker_number_rationality(self) -> None:
        """Warn, as torch does, when more worker processes are asked for than CPUs usable."""
        workers = self._conveyor_options.workers
        workers.kind.check_count(workers.num_workers)

    # ------------------------------------------------------------- iteration
    @property
    def _auto_collation(self) -> bool:
        return self._conveyor_options.data.auto_collation

    @property
    def _index_sampler(self) -> Iterable[Any]:
        return self._conveyor_options.data.index_sampler

    def _hooks(self) -> EpochHooks:
        """DataPipe graphs: shard and seed per worker and rank; fullsync's collective."""
        options = self._conveyor_options
        collectives = self._conveyor_collectives
        all_ranks_have = collectives.all_have if options.fullsync else None
        dataset = options.data.dataset
        if not options.data.iterable_style and not self._conveyor_warned_unsharded:
            self._conveyor_warned_unsharded = True
            warn_if_sampler_does_not_shard(options.data.index_sampler, world_and_rank()[0])
        if not is_datapipe(dataset):
            return EpochHooks(all_ranks_have=all_ranks_have)
        # Imported here: they pull in every DataPipe operation, which a loader over a plain
        # Dataset never needs (`import conveyor` time, S4).
        from conveyor.datapipes.loading import list_once, prepare_graph, warn_if_unsharded
        from conveyor.datapipes.profiling import StageTimers

        world_size, rank = world_and_rank()
        if not self._conveyor_warned_unsharded:
            self._conveyor_warned_unsharded = True
            warn_if_unsharded(dataset, max(1, options.workers.num_workers) * world_size)
        list_once(dataset, collectives.share_text)  # here, before any worker starts

        def draw_shared_seed(generator: torch.Generator | None) -> int:
            return collectives.agree_seed(draw_base_seed(generator))

        return EpochHooks(
            prepare_graph=functools.partial(
                prepare_graph,
                world_size=world_size,
                rank=rank,
                private_copy=options.workers.kind.private_copies,
            ),
            draw_shared_seed=draw_shared_seed,
            stage_timers=StageTimers if options.profile_stages else None,
            all_ranks_have=all_ranks_have,
        )

    def _get_iterator(self) -> Any:
        """A new epoch's iterator. Subclasses may return another object around it (PyG
        wraps it with a transform): the loader's checkpoints and stats follow the epoch
        started here, whatever ``__iter__`` hands out."""
        ref = weakref.ref(self)

        def len_hint() -> int | None:
            loader = ref()
            return None if loader is None else loader._IterableDataset_len_called

        plan = LoadPlan(self._conveyor_options, self._hooks(), self._conveyor_next_epoch)
        resume, self._conveyor_resume = self._conveyor_resume, None
        workers = plan.options.workers
        iterator: LoaderIterator
        if workers.num_workers == 0:
            iterator = SingleProcessIterator(plan, len_hint, resume)
        else:
            workers.kind.check_start(plan.options.data.dataset, workers)
            iterator = MultiWorkerIterator(plan, len_hint, resume)
            if workers.persistent_workers:
                self._conveyor_persistent = iterator
        self._conveyor_track(iterator)
        return iterator

    def __iter__(self) -> Any:
        """torch's protocol: a new iterator per epoch, or with persistent workers the one
        from ``_get_iterator`` again, told ``_reset(loader)``."""
        take_request_counts()  # this epoch's stats count this epoch's remote requests
        workers = self._conveyor_options.workers
        if not (workers.persistent_workers and workers.num_workers > 0):
            return self._get_iterator()
        if self._iterator is None or self._conveyor_persistent is None:
            self._iterator = self._get_iterator()
        else:
            self._iterator._reset(self)
            self._conveyor_track(self._conveyor_persistent)
        return self._iterator

    def _conveyor_track(self, iterator: LoaderIterator) -> None:
        """The epoch ``iterator`` runs is the one ``state_dict()`` and ``stats()`` describe."""
        self._conveyor_next_epoch = iterator.epoch + 1
        self._conveyor_epoch = weakref.ref(iterator)
        self._conveyor_epoch_clock = iterator.clock
        self._conveyor_dropped_state = None
        self._conveyor_epoch_serial += 1
        iterator.keep_state_when_dropped = _state_keeper(self, self._conveyor_epoch_serial)

    # ---------------------------------------------------------- observability
    def stats(self) -> LoaderStats:
        """Counters of the current (or last) epoch: throughput, time spent waiting for
        data versus computing, and per-worker busy time. ``stats().summary()`` says in
        one line whether the loader is the bottleneck."""
        return (self._conveyor_epoch_clock or StepClock()).snapshot()

    def doctor(
        self,
        step: Callable[[Any], object] | None = None,
        batches: int = 48,
        counterfactual: bool = True,
        max_seconds: float = 20.0,
    ) -> DoctorReport:
        """Measure where this loader's time goes under ``step`` (your training step, called
        with each batch; None: a blocking wait as long as the last epoch's step), name the
        bottleneck and the top fix with its predicted gain, and run the fix on a copy of
        this loader to measure it (``counterfactual``). ``print(report)`` or
        ``report.to_json()``; see docs/guide/doctor.md.

        Runs up to ``batches`` batches (or ``max_seconds``) twice plus a short replay of
        cached batches through ``step``. The first run is an epoch of this loader, left
        unfinished, so its sampler's generator moves on as an epoch would. Under
        torch.distributed every rank must call it with the same ``batches``: the ranks
        exchange their timings and adopt the verdict of the rank that waited longest.
        """
        from conveyor.doctor import examine

        return examine(self, step, batches, counterfactual, max_seconds)

    def _conveyor_variant(self, **changes: Any) -> DataLoader[T_co]:
        """A copy with torch attributes changed (``num_workers``, ``in_order``,
        ``prefetch_factor``, ``worker_type``, ``pin_memory``): the doctor's
        counterfactual. It shares the dataset and sampler, and has epochs of its own."""
        variant = copy.copy(self)  # __getstate__: no epoch of this loader comes along
        variant.__dict__.update(_iterator=None, _conveyor_persistent=None, _conveyor_resume=None)
        worker_type = changes.pop("worker_type", None)
        if worker_type is not None:  # a kind of its own: this loader's stays open
            options = self._conveyor_options.changed("workers", kind=worker_kind(worker_type))
            variant.__dict__.update(_conveyor_options=options, worker_type=worker_type)
        if changes.get("num_workers", 0) > 0 and self.prefetch_factor is None:
            changes.setdefault("prefetch_factor", 2)
        for name, value in changes.items():
            setattr(variant, name, value)
        return variant

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> LoaderStateDict:
        """Where the user is: resuming from it yields exactly the remaining batches.

        Cheap (a few attribute reads): call it every step if you like. Counts only batches
        the user received, not those prefetched. See docs/design/checkpointing.md.
        """
        state = self._conveyor_current_state()
        return checked_for_save(state, self.dataset, stateful_sampler(self._index_sampler))

    def _conveyor_current_state(self) -> LoaderStateDict:
        epoch = self._conveyor_epoch
        iterator = epoch() if epoch is not None else None
        if iterator is not None and not iterator.finished:
            return iterator.state_dict()
        if self._conveyor_dropped_state is not None:  # the loop was left (break) mid-epoch
            return self._conveyor_dropped_state
        if self._conveyor_resume is not None:
            return self._conveyor_resume.state  # loaded but not started yet
        return between_epochs_state(
            self._conveyor_options.data.generator,
            self._index_sampler,
            self._conveyor_next_epoch,
        )

    def load_state_dict(self, state_dict: LoaderStateDict) -> None:
        """Make the next ``iter(loader)`` continue from ``state_dict``.

        Raises TypeError for what is not a checkpoint dict or not plain data (a checkpoint
        never runs code: nothing in it is unpickled), ValueError for an incomplete one, one
        of another version or library, and one this loader cannot honour (another dataset
        length or sampler: see ``conveyor.state.fingerprint``). A different ``batch_size``
        is honoured: the rest of the epoch is re-batched from the sample count.
        """
        check_state_keys(state_dict)
        check_version(state_dict)
        check_loadable(state_dict)
        check_loader_state(state_dict)
        self._conveyor_check_counts(state_dict)
        self._conveyor_next_epoch = int(state_dict.get("epoch", 0))
        self._conveyor_dropped_state = None
        options = self._conveyor_options
        generator = options.data.generator
        if state_dict.get("in_epoch"):
            check_fingerprint(state_dict.get("fingerprint"), fingerprint_of(options.data))
            check_generator(state_dict, generator)
        resume: Resume | None = None
        if not state_dict.get("in_epoch", False):
            saved = state_dict.get("generator")
            if saved is not None and generator is not None:
                generator.set_state(saved)
            index_sampler = options.data.index_sampler
            if state_dict.get("sampler") is not None and has_state(index_sampler):
                index_sampler.load_state_dict(state_dict["sampler"])  # type: ignore[attr-defined]
            # what the next epoch starts from: states at the epoch's end, a kept base seed
            workers = options.workers.num_workers
            resume = next_epoch_resume(state_dict, workers, world_and_rank())
        else:
            resume = Resume(state_dict)
        self._conveyor_resume = resume
        if self._conveyor_persistent is not None:
            self._conveyor_persistent.close()  # persistent workers restart from the checkpoint
            self._conveyor_persistent = self._iterator = None

    def _conveyor_check_counts(self, state: LoaderStateDict) -> None:
        """ValueError when a checkpoint says more was delivered than this epoch holds."""
        data = self._conveyor_options.data
        if data.iterable_style or not state.get("in_epoch"):
            return
        saved = state.get("fingerprint") or {}
        try:
            batches = len(self._index_sampler)  # type: ignore[arg-type]
        except TypeError:
            return
        same_batches = saved.get("batch_size") == data.batch_size and not state.get("rebatched")
        if same_batches and int(state.get("yielded", 0)) > batches:
            raise ValueError(
                f"DataLoader.load_state_dict: checkpoint field yielded={state.get('yielded')} "
                f"is more batches than this loader's epoch holds ({batches})"
            )
        samples = state.get("samples")
        if samples is not None and data.sampler is not None:
            try:
                total = len(data.sampler)  # type: ignore[arg-type]
            except TypeError:
                return
            if samples > total:
                raise ValueError(
                    f"DataLoader.load_state_dict: checkpoint field samples={samples} is more "
                    f"samples than this loader's epoch holds ({total})"
                )

    def __len__(self) -> int:
        data = self._conveyor_options.data
        if not data.iterable_style:
            return len(data.index_sampler)  # type: ignore[arg-type]
        length = len(data.dataset)
        self._IterableDataset_len_called = length
        if data.batch_size is not None:
            if data.drop_last:
                return length // data.batch_size
            return math.ceil(length / data.batch_size)
        return length


def _state_keeper(loader: DataLoader[Any], serial: int) -> Callable[[LoaderStateDict], None]:
    """Stores a dropped iterator's state on ``loader`` unless a later epoch has begun."""
    ref = weakref.ref(loader)

    def keep(state: LoaderStateDict) -> None:
        owner = ref()
        if owner is not None and owner._conveyor_epoch_serial == serial:
            owner._conveyor_dropped_state = state

    return keep
