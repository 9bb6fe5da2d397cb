"""The DataLoader facade: check torch's arguments into one options object, run it on the engine."""

from __future__ import annotations

import functools
import math
import os  # noqa: F401  # torch's module has it: tests patch conveyor.dataloader.os.cpu_count
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import torch

from conveyor.collate import default_collate, default_convert
from conveyor.dataset import Dataset
from conveyor.distributed import (
    RankCollectives,
    warn_if_sampler_does_not_shard,
    world_and_rank,
)
from conveyor.engine.base_iterator import LoaderIterator
from conveyor.engine.multi_worker import MultiWorkerIterator
from conveyor.engine.options import ErrorOptions, LoaderOptions, PinOptions, check_snapshot_steps
from conveyor.engine.plan import EpochHooks, LoadPlan
from conveyor.engine.request_deltas import take_request_counts
from conveyor.engine.seeding import draw_base_seed
from conveyor.engine.single_process import SingleProcessIterator
from conveyor.engine.worker_info import WorkerInfo, get_worker_info
from conveyor.engine.worker_kind import (
    MultiprocessingContext,
    WorkerOptions,
    check_worker_args,
    resolve_context,
)
from conveyor.engine.worker_kinds import resolve_worker_type, worker_kind
from conveyor.loader_args import is_datapipe, resolve_sampling
from conveyor.sampler import Sampler
from conveyor.state.fingerprint import check_fingerprint, check_state_keys, fingerprint_of
from conveyor.state.loader_state import (
    STATE_VERSION,
    LoaderStateDict,
    Resume,
    check_generator,
    check_version,
    next_epoch_resume,
)
from conveyor.state.protocol import has_state
from conveyor.stats.counters import StepClock
from conveyor.torch_compat import DatasetKind as _DatasetKind
from conveyor.torch_compat import TorchDataLoader, is_iterable_style

if TYPE_CHECKING:
    from conveyor.stats.report import LoaderStats

__all__ = ["DataLoader", "WorkerInfo", "default_collate", "default_convert", "get_worker_info"]

T_co = TypeVar("T_co", covariant=True)
V = TypeVar("V")

_FROZEN_AFTER_INIT = frozenset(
    ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")
)


class _Option(Generic[V]):
    """A DataLoader attribute kept in its `LoaderOptions`. Reading it is a lookup; setting
    it replaces the concern it belongs to, which checks itself again."""

    def __init__(self, concern: str, field: str = "") -> None:
        self._concern = concern
        self._field = field

    def __set_name__(self, owner: type, name: str) -> None:
        self._field = self._field or name
        self._name = name

    @overload
    def __get__(self, loader: None, owner: type) -> _Option[V]: ...

    @overload
    def __get__(self, loader: DataLoader[Any], owner: type) -> V: ...

    def __get__(self, loader: DataLoader[Any] | None, owner: type) -> V | _Option[V]:
        if loader is None:
            return self
        options = loader._options
        part = getattr(options, self._concern) if self._concern else options
        value: V = getattr(part, self._field)
        return value

    def __set__(self, loader: DataLoader[Any], value: V) -> None:
        loader._options = loader._options.changed(self._concern, **{self._field: value})
        loader.__dict__[self._name] = self.__get__(loader, type(loader))


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
        snapshot_every_n_steps: accepted for torchdata's StatefulDataLoader users; every
            step is exact here (see ``state_dict``), so it changes nothing.
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

    Raises:
        ValueError: for arguments that exclude each other or are out of range, naming the
            argument and what to change (torch's messages where torch has one).
    """

    dataset = _Option[Dataset[T_co]]("data")
    batch_size = _Option[int | None]("data")
    sampler = _Option[Sampler[Any] | Iterable[Any]]("data")
    batch_sampler = _Option[Sampler[list[Any]] | Iterable[list[Any]] | None]("data")
    drop_last = _Option[bool]("data")
    collate_fn = _Option[Callable[[Any], Any]]("data")
    generator = _Option[torch.Generator | None]("data")
    num_workers = _Option[int]("workers")
    prefetch_factor = _Option[int | None]("workers")
    worker_init_fn = _Option[Callable[[int], None] | None]("workers")
    persistent_workers = _Option[bool]("workers")
    timeout = _Option[float]("workers", "timeout_s")
    in_order = _Option[bool]("workers")
    pin_memory = _Option[bool]("pin", "enabled")
    pin_memory_device = _Option[str]("pin", "device")
    on_error = _Option[str]("errors")
    max_skipped = _Option[int | None]("errors")
    fullsync = _Option[bool]("")
    profile_stages = _Option[bool]("")
    snapshot_every_n_steps = _Option[int | None]("")

    _options: LoaderOptions
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
    ) -> None:
        # Checked in torch's order; each concern checks itself as it is built.
        check_snapshot_steps(snapshot_every_n_steps)
        check_worker_args(num_workers, timeout, prefetch_factor, persistent_workers)
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        workers = WorkerOptions(
            kind=worker_kind(
                resolve_worker_type(worker_type, worker_method),
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
        self._options = LoaderOptions(
            data=data,
            workers=workers,
            pin=PinOptions(pin_memory, pin_memory_device),
            errors=errors,
            fullsync=fullsync,
            profile_stages=profile_stages,
            snapshot_every_n_steps=snapshot_every_n_steps,
        )
        self._IterableDataset_len_called: int | None = None
        self._iterator: LoaderIterator | None = None
        self._collectives = RankCollectives()
        self._resume: Resume | None = None
        self._warned_unsharded = False
        self._epoch_iterator: weakref.ReferenceType[LoaderIterator] | None = None
        self._epoch_clock: StepClock | None = None
        self._epoch_serial = 0
        self._dropped_state: LoaderStateDict | None = None
        self._mirror_attributes()
        self.__initialized = True
        self.check_worker_number_rationality()
        workers.kind.warm_up(workers)  # spawn/forkserver: the zygote starts importing now

    def _mirror_attributes(self) -> None:
        """Keep the options' values in the instance ``__dict__`` too, under torch's names.

        Reads go through the descriptors (they take precedence); the copies are for code
        that rebuilds a loader from ``vars(loader)``, as torch's DataLoader keeps them
        there: Lightning does so to inject its DistributedSampler.
        """
        for cls in reversed(type(self).__mro__):
            for name, value in vars(cls).items():
                if isinstance(value, _Option):
                    self.__dict__[name] = getattr(self, name)
        self.__dict__["worker_type"] = self.worker_type

    # ------------------------------------------------------------ attributes
    @property
    def multiprocessing_context(self) -> MultiprocessingContext | None:
        return self._options.workers.multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, context: str | MultiprocessingContext | None) -> None:
        resolved = resolve_context(context, self.num_workers)
        self._options = self._options.changed("workers", multiprocessing_context=resolved)
        self._options.workers.kind.warm_up(self._options.workers)

    @property
    def worker_type(self) -> str:
        """``"process"``, ``"thread"`` or ``"ray"``: the kind of this loader's workers."""
        return self._options.workers.kind.name

    @worker_type.setter
    def worker_type(self, name: str) -> None:
        old = self._options.workers.kind
        self._options = self._options.changed("workers", kind=worker_kind(name))
        self.__dict__["worker_type"] = name
        old.close()

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__initialized and name in _FROZEN_AFTER_INIT:
            raise ValueError(
                f"{name} attribute should not be set after {type(self).__name__} is initialized"
            )
        object.__setattr__(self, name, value)  # not torch's __setattr__

    def check_worker_number_rationality(self) -> None:
        """Warn, as torch does, when more worker processes are asked for than CPUs usable."""
        self._options.workers.kind.check_count(self.num_workers)

    # ------------------------------------------------------------- iteration
    @property
    def _auto_collation(self) -> bool:
        return self._options.data.auto_collation

    @property
    def _index_sampler(self) -> Iterable[Any]:
        return self._options.data.index_sampler

    @property
    def _dataset_kind(self) -> int:
        """torch's ``_DatasetKind.Map`` (0) or ``_DatasetKind.Iterable`` (1)."""
        return _DatasetKind.Iterable if self._options.data.iterable_style else _DatasetKind.Map

    def _hooks(self) -> EpochHooks:
        """DataPipe graphs: shard and seed per worker and rank; fullsync's collective."""
        all_ranks_have = self._collectives.all_have if self.fullsync else None
        dataset = self.dataset
        if not self._options.data.iterable_style and not self._warned_unsharded:
            self._warned_unsharded = True
            warn_if_sampler_does_not_shard(self._index_sampler, world_and_rank()[0])
        if not is_datapipe(dataset):
            return EpochHooks(all_ranks_have=all_ranks_have)
        # Imported here: they pull in every DataPipe operation, which a loader over a plain
        # Dataset never needs (`import conveyor` time, S4).
        from conveyor.datapipes.loading import list_once, prepare_graph, warn_if_unsharded
        from conveyor.datapipes.profiling import StageTimers

        world_size, rank = world_and_rank()
        if not self._warned_unsharded:
            self._warned_unsharded = True
            warn_if_unsharded(dataset, max(1, self.num_workers) * world_size)
        collectives = self._collectives
        list_once(dataset, collectives.share_text)  # here, before any worker starts

        def draw_shared_seed(generator: torch.Generator | None) -> int:
            return collectives.agree_seed(draw_base_seed(generator))

        return EpochHooks(
            prepare_graph=functools.partial(
                prepare_graph,
                world_size=world_size,
                rank=rank,
                private_copy=self._options.workers.kind.private_copies,
            ),
            draw_shared_seed=draw_shared_seed,
            stage_timers=StageTimers if self.profile_stages else None,
            all_ranks_have=all_ranks_have,
        )

    def _get_iterator(self) -> LoaderIterator:
        ref = weakref.ref(self)

        def len_hint() -> int | None:
            loader = ref()
            return None if loader is None else loader._IterableDataset_len_called

        plan = LoadPlan(self._options, self._hooks())
        resume, self._resume = self._resume, None
        workers = plan.options.workers
        if workers.num_workers == 0:
            return SingleProcessIterator(plan, len_hint, resume)
        workers.kind.check_start(self.dataset, workers)
        return MultiWorkerIterator(plan, len_hint, resume)

    def __iter__(self) -> LoaderIterator:
        take_request_counts()  # this epoch's stats count this epoch's remote requests
        if not (self.persistent_workers and self.num_workers > 0):
            iterator = self._get_iterator()
        elif isinstance(self._iterator, MultiWorkerIterator) and self._resume is None:
            iterator = self._iterator
            iterator.reset()
        else:
            iterator = self._iterator = self._get_iterator()
        self._epoch_iterator = weakref.ref(iterator)
        self._epoch_clock = iterator.clock
        self._dropped_state = None
        self._epoch_serial += 1
        iterator.keep_state_when_dropped = _state_keeper(self, self._epoch_serial)
        return iterator

    # ---------------------------------------------------------- observability
    def stats(self) -> LoaderStats:
        """Counters of the current (or last) epoch: throughput, time spent waiting for
        data versus computing, and per-worker busy time. ``stats().summary()`` says in
        one line whether the loader is the bottleneck."""
        return (self._epoch_clock or StepClock()).snapshot()

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> LoaderStateDict:
        """Where the user is: resuming from it yields exactly the remaining batches.

        Cheap (a few attribute reads): call it every step if you like. Counts only batches
        the user received, not those prefetched. See docs/design/checkpointing.md.
        """
        iterator = self._epoch_iterator() if self._epoch_iterator is not None else None
        if iterator is not None and not iterator.finished:
            return iterator.state_dict()
        if self._dropped_state is not None:  # the loop was left (break) mid-epoch
            return self._dropped_state
        if self._resume is not None:
            return self._resume.state  # loaded but not started yet
        state: LoaderStateDict = {
            "version": STATE_VERSION,
            "in_epoch": False,
            "generator": self.generator.get_state() if self.generator is not None else None,
        }
        # a sampler that draws from its own generator (torchdata's RandomSampler) says
        # where the next epoch starts; others start each epoch afresh
        next_epoch_state = getattr(self._index_sampler, "next_epoch_state", None)
        if callable(next_epoch_state):
            state["sampler"] = next_epoch_state()
        return state

    def load_state_dict(self, state_dict: LoaderStateDict) -> None:
        """Make the next ``iter(loader)`` continue from ``state_dict``.

        Raises TypeError for what is not a checkpoint dict, ValueError for an incomplete
        one, one of another version or library, and one this loader cannot honour (another
        dataset length or sampler: see ``conveyor.state.fingerprint``). A different
        ``batch_size`` is honoured: the rest of the epoch is re-batched from the sample
        count.
        """
        check_state_keys(state_dict)
        check_version(state_dict)
        self._dropped_state = None
        if state_dict.get("in_epoch"):
            check_fingerprint(state_dict.get("fingerprint"), fingerprint_of(self._options.data))
            check_generator(state_dict, self.generator)
        if not state_dict.get("in_epoch", False):
            saved = state_dict.get("generator")
            if saved is not None and self.generator is not None:
                self.generator.set_state(saved)
            if state_dict.get("sampler") is not None and has_state(self._index_sampler):
                self._index_sampler.load_state_dict(state_dict["sampler"])  # type: ignore[attr-defined]
            self._resume = None
            if self._options.data.iterable_style:  # streams' states at the epoch's end
                self._resume = next_epoch_resume(state_dict, self.num_workers, world_and_rank())
        else:
            self._resume = Resume(state_dict)
        if isinstance(self._iterator, MultiWorkerIterator):
            self._iterator.close()  # persistent workers restart from the checkpoint
            self._iterator = None

    def __len__(self) -> int:
        if not self._options.data.iterable_style:
            return len(self._index_sampler)  # type: ignore[arg-type]
        length = len(self.dataset)  # type: ignore[arg-type]
        self._IterableDataset_len_called = length
        if self.batch_size is not None:
            if self.drop_last:
                return length // self.batch_size
            return math.ceil(length / self.batch_size)
        return length


def _state_keeper(loader: DataLoader[Any], serial: int) -> Callable[[LoaderStateDict], None]:
    """Stores a dropped iterator's state on ``loader`` unless a later epoch has begun."""
    ref = weakref.ref(loader)

    def keep(state: LoaderStateDict) -> None:
        owner = ref()
        if owner is not None and owner._epoch_serial == serial:
            owner._dropped_state = state

    return keep
