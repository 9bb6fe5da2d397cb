"""What one iterator runs: the loader's options and the facade's per-epoch hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from conveyor.engine.loop.options import LoaderOptions

__all__ = ["EpochHooks", "LoadPlan"]


class EpochHooks(NamedTuple):
    """Services the facade lends the engine at ``iter()`` (none are options)."""

    # Per-worker graph preparation (DataPipes: sharding, seeding): (dataset, worker_id,
    # num_workers, shared_seed) -> dataset.
    prepare_graph: Callable[[Any, int, int, int | None], Any] | None = None
    # Draws the per-epoch seed shared by every worker and rank (DataPipe graphs only).
    draw_shared_seed: Callable[[torch.Generator | None], int] | None = None
    # profile_stages=True: dataset -> object with install()/snapshot() timing its stages.
    stage_timers: Callable[[Any], Any] | None = None
    # fullsync: (this rank has a batch) -> every rank has one.
    all_ranks_have: Callable[[bool], bool] | None = None


class LoadPlan(NamedTuple):
    """The loader's options as of ``iter()``, with the hooks of that moment."""

    options: LoaderOptions
    hooks: EpochHooks = EpochHooks()
    epoch: int = 0  # the loader's epochs started before this one (checkpoints keep it)
