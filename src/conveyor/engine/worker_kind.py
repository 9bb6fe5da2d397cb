"""How workers run: their options, the strategy of each worker kind, and what a worker gets.

`WorkerKind` is the one seam between the loader and a kind of worker (processes,
threads; a third kind is one more class behind it): the facade picks one per loader with
`conveyor.engine.worker_kinds.worker_kind`, and nothing else asks which kind it has.
`WorkerSetup` is everything a worker receives, derived from the loader's options.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any, NamedTuple, Protocol

from conveyor.engine.fetch import FetchSpec
from conveyor.engine.frozen import Frozen
from conveyor.engine.pool import WorkerPool
from conveyor.engine.seeding import EpochSeeds
from conveyor.engine.worker_info import WorkerInfo
from conveyor.state.loader_state import StreamResume
from conveyor.transport.options import SlabOptions

__all__ = [
    "MultiprocessingContext",
    "Pin",
    "WorkerKind",
    "WorkerOptions",
    "WorkerSetup",
    "check_worker_args",
    "resolve_context",
]

Pin = Callable[[Any], Any]
"""Copies a batch into pinned memory."""

MultiprocessingContext = BaseContext
"""What ``multiprocessing_context`` resolves to (for modules that may not import it)."""


_NEGATIVE_WORKERS = (
    "num_workers option should be non-negative; use num_workers=0 to disable multiprocessing."
)
_NEGATIVE_TIMEOUT = "timeout option should be non-negative"
_NEGATIVE_PREFETCH = "prefetch_factor option should be non-negative"


def check_worker_args(
    num_workers: int, timeout: float, prefetch_factor: int | None, persistent_workers: bool
) -> None:
    """torch's checks of the worker arguments together, in torch's order (construction)."""
    if num_workers < 0:
        raise ValueError(_NEGATIVE_WORKERS)
    if timeout < 0:
        raise ValueError(_NEGATIVE_TIMEOUT)
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError(
            "prefetch_factor option could only be specified in multiprocessing. Let "
            "num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None."
        )
    if prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError(_NEGATIVE_PREFETCH)
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")


def resolve_context(context: str | BaseContext | None, num_workers: int) -> BaseContext | None:
    """Validate ``multiprocessing_context`` as torch does; a start method name becomes a context."""
    if context is None:
        return None
    if num_workers == 0:
        raise ValueError(
            "multiprocessing_context can only be used with multi-process loading "
            f"(num_workers > 0), but got num_workers={num_workers}"
        )
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ValueError(
                "multiprocessing_context option should specify a valid start method "
                f"in {methods!r}, but got multiprocessing_context={context!r}"
            )
        return multiprocessing.get_context(context)
    if not isinstance(context, BaseContext):
        raise TypeError(
            "multiprocessing_context option should be a valid context object or a "
            f"string specifying the start method, but got multiprocessing_context={context}"
        )
    return context


class WorkerOptions(Frozen):
    """How workers run; fixed for the life of an iterator (persistent workers are reused).

    ``num_workers=0`` loads in the calling thread. The checks that tie arguments together
    at construction (``prefetch_factor`` without workers, ...) are `check_worker_args`;
    here each field is checked on its own, so ``loader.num_workers = 0`` stays allowed.
    """

    __slots__ = (
        "in_order",
        "kind",
        "multiprocessing_context",
        "num_workers",
        "persistent_workers",
        "prefetch_factor",
        "share_records",
        "slab_options",
        "timeout_s",
        "worker_init_fn",
    )
    kind: WorkerKind
    num_workers: int
    prefetch_factor: int | None
    multiprocessing_context: BaseContext | None  # None: the default start method
    worker_init_fn: Callable[[int], None] | None
    persistent_workers: bool
    timeout_s: float  # 0: wait forever (kept as given: ``loader.timeout`` reads it)
    in_order: bool
    slab_options: SlabOptions | None  # process workers' transport; None: from env
    share_records: bool  # large plain lists reach process workers as shared tables

    def __init__(
        self,
        kind: WorkerKind,
        num_workers: int = 0,
        prefetch_factor: int | None = None,
        multiprocessing_context: BaseContext | None = None,
        worker_init_fn: Callable[[int], None] | None = None,
        persistent_workers: bool = False,
        timeout_s: float = 0,
        in_order: bool = True,
        slab_options: SlabOptions | None = None,
        share_records: bool = True,
    ) -> None:
        if num_workers < 0:
            raise ValueError(_NEGATIVE_WORKERS)
        if timeout_s < 0:
            raise ValueError(_NEGATIVE_TIMEOUT)
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError(_NEGATIVE_PREFETCH)
        self._set(locals())

    @property
    def context(self) -> BaseContext:
        """The multiprocessing context workers start from (the default when unset)."""
        return self.multiprocessing_context or multiprocessing.get_context()

    @property
    def tasks_in_flight(self) -> int:
        """Most tasks outstanding at once; ``prefetch_factor=0`` would hang (it does in
        torch), so at least one."""
        return max(1, (self.prefetch_factor or 0) * self.num_workers)


class WorkerSetup(NamedTuple):
    """Everything a worker needs, pickled once for all workers under spawn/forkserver."""

    fetch: FetchSpec
    workers: WorkerOptions
    seeds: EpochSeeds
    # Per-worker graph preparation (DataPipes: sharding, seeding): (dataset, worker_id,
    # num_workers, shared_seed) -> dataset.
    prepare_graph: Callable[[Any, int, int, int | None], Any] | None = None
    stage_timers: Callable[[Any], Any] | None = None  # profile_stages=True
    streams: StreamResume | None = None  # resuming a checkpoint of a stream
    world: tuple[int, int] = (1, 0)  # (world size, rank) of the loader's process

    @property
    def kind(self) -> WorkerKind:
        return self.workers.kind


class WorkerKind(Protocol):
    """One kind of worker. An instance belongs to one loader and may keep what its
    workers reuse across epochs (a zygote); it pickles as a fresh instance."""

    name: str  # "process", "thread": WorkerInfo.worker_type and error messages
    private_copies: bool  # workers share this process: each needs its own dataset copy

    # ----- in the main process
    def check_count(self, num_workers: int) -> None:
        """Warn (as torch does) when more workers are asked for than this machine suits."""

    def check_start(self, dataset: Any, options: WorkerOptions) -> None:
        """Before an iterator starts workers: warn about what this kind does badly here."""

    def warm_up(self, options: WorkerOptions, dataset: Any = None) -> None:
        """The loader was built: start, in the background, what the first ``iter()`` would
        otherwise wait for (a zygote's interpreter and imports; the shared tables of
        ``dataset``'s large lists, None for a DataPipe graph). Never raises."""

    def start_pool(self, setup: WorkerSetup, pin: Pin | None) -> tuple[WorkerPool, Pin | None]:
        """Start ``setup.workers.num_workers`` workers. Returns the pool and the pin
        function the iterator must still apply (None when the pool pins by itself)."""

    def close(self) -> None:
        """Free what the kind keeps across epochs. Idempotent."""

    # ----- in a worker
    def seed(self, base_seed: int, worker_id: int) -> int:
        """Seed what this worker may seed; returns the worker's seed."""

    def own_dataset(self, dataset: Any) -> Any:
        """This worker's replica of ``dataset``."""

    def publish(self, info: WorkerInfo) -> None:
        """Make ``info`` what `get_worker_info` returns in this worker."""
