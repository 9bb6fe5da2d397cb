"""What one epoch of loading needs, decided once by the facade and handed to the engine."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from conveyor.transport.options import SlabOptions


@dataclass(frozen=True)
class WorkerOptions:
    """How workers run; fixed for the life of a loader (persistent workers are reused)."""

    num_workers: int
    prefetch_factor: int
    worker_type: str  # "process" or "thread"
    multiprocessing_context: Any  # a multiprocessing context; None means the default
    worker_init_fn: Callable[[int], None] | None
    persistent_workers: bool
    timeout_s: float
    in_order: bool
    # Shared-memory transport of process workers; None: SlabOptions.from_env().
    slab_options: SlabOptions | None = None


@dataclass(frozen=True)
class LoadPlan:
    """The recipe of one loader: dataset, how to index it and how to collate."""

    dataset: Any
    iterable_style: bool
    auto_collation: bool
    collate_fn: Callable[[Any], Any]
    drop_last: bool
    index_sampler: Iterable[Any]
    generator: torch.Generator | None
    pin_memory: bool
    pin_memory_device: str
    workers: WorkerOptions | None  # None: load in the calling thread
    # Per-worker graph preparation (DataPipes: sharding, seeding): (dataset, worker_id,
    # num_workers, shared_seed) -> dataset.
    graph_hook: Callable[[Any, int, int, int | None], Any] | None = None
    # Draws the per-epoch seed shared by every worker and rank (DataPipe graphs only).
    draw_shared_seed: Callable[[torch.Generator | None], int] | None = None
    # on_error="skip": drop samples whose __getitem__ raises (map-style), up to a limit.
    skip_bad_samples: bool = False
    # profile_stages=True: dataset -> object with install()/snapshot() timing its stages.
    stage_timers: Callable[[Any], Any] | None = None
    max_skipped: int | None = None
    # fullsync: (this rank has a batch) -> every rank has one; None when not synchronised.
    all_ranks_have: Callable[[bool], bool] | None = None
