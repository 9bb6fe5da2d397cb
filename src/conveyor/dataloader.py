"""The DataLoader facade: validate torch's arguments, build a plan, run it on the engine."""

from __future__ import annotations

import functools
import math
import multiprocessing
import os  # noqa: F401  # torch's module has it: tests patch conveyor.dataloader.os.cpu_count
import weakref
from collections.abc import Callable, Iterable
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

import torch

from conveyor.collate import default_collate, default_convert
from conveyor.datapipes.base import IterDataPipe
from conveyor.datapipes.loading import prepare_graph, warn_if_unsharded
from conveyor.datapipes.profiling import StageTimers
from conveyor.dataset import Dataset
from conveyor.distributed import RankCollectives, world_and_rank
from conveyor.engine.base_iterator import LoaderIterator
from conveyor.engine.multi_worker import MultiWorkerIterator, uses_zygote
from conveyor.engine.plan import LoadPlan, WorkerOptions
from conveyor.engine.seeding import draw_base_seed
from conveyor.engine.single_process import SingleProcessIterator
from conveyor.engine.worker_info import WorkerInfo, get_worker_info
from conveyor.engine.zygote import Zygote
from conveyor.graph_settings import apply_shuffle_settings
from conveyor.loader_args import (
    check_on_error,
    check_snapshot_steps,
    check_worker_args,
    resolve_context,
    resolve_worker_type,
    warn_if_cuda_before_fork,
    warn_if_too_many_workers,
)
from conveyor.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from conveyor.state.loader_state import STATE_VERSION, LoaderStateDict, Resume, check_version
from conveyor.stats.counters import LoaderStats, StepClock
from conveyor.string_table import warn_copy_on_read
from conveyor.torch_compat import DatasetKind as _DatasetKind
from conveyor.torch_compat import TorchDataLoader, is_iterable_style

__all__ = ["DataLoader", "WorkerInfo", "default_collate", "default_convert", "get_worker_info"]

T_co = TypeVar("T_co", covariant=True)

_FROZEN_AFTER_INIT = frozenset(
    ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")
)


class _InfiniteConstantSampler(Sampler[None]):
    """Yields ``None`` forever: iterable-style datasets ignore indices."""

    def __iter__(self) -> Any:
        while True:
            yield None


class DataLoader(TorchDataLoader[T_co]):
    """Same as `torch.utils.data.DataLoader`, and a subclass of it (none of its code runs).

    Differences (additions only):
        worker_type: ``"process"`` (default, torch's behaviour) or ``"thread"`` — workers
            run as threads of this process: no start-up cost, no transfer, best for I/O
            and GIL-releasing work. Same semantics otherwise. ``worker_method`` is an alias.
        fullsync: under torch.distributed, every rank ends the epoch as soon as one rank
            runs out of batches (one gloo all-reduce per batch), so ranks with uneven
            shards run the same number of steps and DDP cannot hang. Extra batches on the
            longer ranks are dropped.
        profile_stages: DataPipe graphs: time every stage in the workers (a few hundred
            ns per item and stage: ~0.4 us measured); ``stats().stages`` and ``summary()`` name
            the slowest stage.
        on_error: ``"raise"`` (torch's behaviour) or ``"skip"``: a sample whose
            ``__getitem__`` raises is left out of its batch and counted (map-style only);
            ``max_skipped`` bad samples per epoch at most, then loading stops with an
            error; each epoch that skipped any ends with a `BadSampleWarning` naming them.
        snapshot_every_n_steps: accepted for torchdata's StatefulDataLoader users; every
            step is exact here (see ``state_dict``), so it changes nothing.
        A worker that dies raises at once with its id, pid and signal instead of hanging.
    """

    dataset: Dataset[T_co]
    batch_size: int | None
    num_workers: int
    pin_memory: bool
    drop_last: bool
    timeout: float
    sampler: Sampler[Any] | Iterable[Any]
    prefetch_factor: int | None

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
        multiprocessing_context: str | BaseContext | None = None,
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
    ) -> None:
        check_snapshot_steps(snapshot_every_n_steps)
        self.snapshot_every_n_steps = snapshot_every_n_steps
        check_worker_args(num_workers, timeout, prefetch_factor, persistent_workers)
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.worker_type = resolve_worker_type(worker_type, worker_method)
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order
        self.fullsync = fullsync

        self._iterable_style = is_iterable_style(dataset)
        self.on_error = on_error
        self.max_skipped = max_skipped
        self._skip_bad = check_on_error(on_error, max_skipped, self._iterable_style)
        if profile_stages and not isinstance(dataset, IterDataPipe):
            raise ValueError(
                "profile_stages=True times the stages of a DataPipe graph; this dataset is "
                f"a {type(dataset).__name__}. Time __getitem__ with stats() instead."
            )
        self.profile_stages = profile_stages
        shuffle = self._check_dataset_kind(dataset, shuffle, sampler, batch_sampler)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    "sampler, and drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive "
                "with drop_last"
            )
        if sampler is None:
            sampler = self._default_sampler(dataset, bool(shuffle), generator)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self._IterableDataset_len_called: int | None = None
        self._iterator: LoaderIterator | None = None
        self._collectives = RankCollectives()
        self._resume: Resume | None = None
        self._warned_copy_on_read = False
        self._warned_unsharded = False
        self._zygote: Zygote | None = None  # spawn/forkserver: forks each epoch's workers
        self._epoch_iterator: weakref.ReferenceType[LoaderIterator] | None = None
        self._epoch_clock: StepClock | None = None
        self.__initialized = True
        self.check_worker_number_rationality()

    # ------------------------------------------------------------ validation
    def _check_dataset_kind(
        self, dataset: Any, shuffle: bool | None, sampler: Any, batch_sampler: Any
    ) -> bool | None:
        if not self._iterable_style:
            return bool(shuffle)
        if isinstance(dataset, IterDataPipe):
            if shuffle is not None:
                apply_shuffle_settings(dataset, shuffle=shuffle)
        elif shuffle not in (False, None):
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified shuffle option, "
                f"but got shuffle={shuffle}"
            )
        if sampler is not None:
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified sampler option, "
                f"but got sampler={sampler}"
            )
        if batch_sampler is not None:
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                f"but got batch_sampler={batch_sampler}"
            )
        return shuffle

    def _default_sampler(
        self, dataset: Any, shuffle: bool, generator: torch.Generator | None
    ) -> Sampler[Any]:
        if self._iterable_style:
            return _InfiniteConstantSampler()
        if shuffle:
            return RandomSampler(dataset, generator=generator)
        return SequentialSampler(dataset)

    @property
    def multiprocessing_context(self) -> BaseContext | None:
        return self.__multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, context: str | BaseContext | None) -> None:
        self.__multiprocessing_context = resolve_context(context, self.num_workers)

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__initialized and name in _FROZEN_AFTER_INIT:
            raise ValueError(
                f"{name} attribute should not be set after {type(self).__name__} is initialized"
            )
        object.__setattr__(self, name, value)  # not torch's __setattr__

    def check_worker_number_rationality(self) -> None:
        """Warn, as torch does, when more worker processes are asked for than CPUs usable."""
        if self.num_workers and self.worker_type != "thread":
            warn_if_too_many_workers(self.num_workers)

    # ------------------------------------------------------------- iteration
    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self) -> Iterable[Any]:
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    @property
    def _dataset_kind(self) -> int:
        """torch's ``_DatasetKind.Map`` (0) or ``_DatasetKind.Iterable`` (1)."""
        return _DatasetKind.Iterable if self._iterable_style else _DatasetKind.Map

    def _plan(self) -> LoadPlan:
        workers = None
        if self.num_workers > 0:
            assert self.prefetch_factor is not None
            workers = WorkerOptions(
                num_workers=self.num_workers,
                prefetch_factor=self.prefetch_factor,
                worker_type=self.worker_type,
                multiprocessing_context=self.multiprocessing_context,
                worker_init_fn=self.worker_init_fn,
                persistent_workers=self.persistent_workers,
                timeout_s=float(self.timeout),
                in_order=self.in_order,
            )
        graph_hook = draw_shared_seed = None
        if isinstance(self.dataset, IterDataPipe):
            world_size, rank = world_and_rank()
            if not self._warned_unsharded:
                self._warned_unsharded = True
                warn_if_unsharded(self.dataset, max(1, self.num_workers) * world_size)
            graph_hook = functools.partial(
                prepare_graph,
                world_size=world_size,
                rank=rank,
                private_copy=self.worker_type == "thread",
            )
            collectives = self._collectives

            def draw_shared_seed(generator: torch.Generator | None) -> int:
                return collectives.agree_seed(draw_base_seed(generator))

        return LoadPlan(
            dataset=self.dataset,
            iterable_style=self._iterable_style,
            auto_collation=self._auto_collation,
            collate_fn=self.collate_fn,
            drop_last=self.drop_last,
            index_sampler=self._index_sampler,
            generator=self.generator,
            pin_memory=self.pin_memory,
            pin_memory_device=self.pin_memory_device,
            workers=workers,
            graph_hook=graph_hook,
            draw_shared_seed=draw_shared_seed,
            all_ranks_have=self._collectives.all_have if self.fullsync else None,
            skip_bad_samples=self._skip_bad,
            max_skipped=self.max_skipped,
            stage_timers=StageTimers if self.profile_stages else None,
        )

    def _get_iterator(self) -> LoaderIterator:
        ref = weakref.ref(self)

        def len_hint() -> int | None:
            loader = ref()
            return None if loader is None else loader._IterableDataset_len_called

        plan = self._plan()
        resume, self._resume = self._resume, None
        if plan.workers is None:
            return SingleProcessIterator(plan, len_hint, resume)
        self.check_worker_number_rationality()
        if self.worker_type == "process" and not self._warned_copy_on_read:
            self._warned_copy_on_read = True
            warn_copy_on_read(self.dataset)
            warn_if_cuda_before_fork(self.multiprocessing_context)
        zygote = None
        if uses_zygote(plan.workers):
            if self._zygote is None:
                context = self.multiprocessing_context or multiprocessing.get_context()
                self._zygote = Zygote(context)
            zygote = self._zygote
        return MultiWorkerIterator(plan, len_hint, resume, zygote=zygote)

    def __iter__(self) -> LoaderIterator:
        if not (self.persistent_workers and self.num_workers > 0):
            iterator = self._get_iterator()
        elif isinstance(self._iterator, MultiWorkerIterator) and self._resume is None:
            iterator = self._iterator
            iterator.reset()
        else:
            iterator = self._iterator = self._get_iterator()
        self._epoch_iterator = weakref.ref(iterator)
        self._epoch_clock = iterator.clock
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
        if self._resume is not None:
            return self._resume.state  # loaded but not started yet
        return {
            "version": STATE_VERSION,
            "in_epoch": False,
            "generator": self.generator.get_state() if self.generator is not None else None,
        }

    def load_state_dict(self, state_dict: LoaderStateDict) -> None:
        """Make the next ``iter(loader)`` continue from ``state_dict``."""
        check_version(state_dict)
        if not state_dict.get("in_epoch", False):
            saved = state_dict.get("generator")
            if saved is not None and self.generator is not None:
                self.generator.set_state(saved)
            self._resume = None
        else:
            self._resume = Resume(state_dict)
        if isinstance(self._iterator, MultiWorkerIterator):
            self._iterator.close()  # persistent workers restart from the checkpoint
            self._iterator = None

    def __len__(self) -> int:
        if not self._iterable_style:
            return len(self._index_sampler)  # type: ignore[arg-type]
        length = len(self.dataset)  # type: ignore[arg-type]
        self._IterableDataset_len_called = length
        if self.batch_size is not None:
            if self.drop_last:
                return length // self.batch_size
            return math.ceil(length / self.batch_size)
        return length
