"""`AutotuneOptions`: what the user may bound when autotune chooses the loader's settings."""

from __future__ import annotations

import os

from conveyor.engine.workers.frozen import Frozen

__all__ = ["WIDEST_READ_AHEAD", "AutotuneOptions", "autotune_options", "available_cpus"]

WIDEST_READ_AHEAD = 16
"""Blocks: the default ``max_read_ahead``, and the read-ahead the doctor advises."""


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class AutotuneOptions(Frozen):
    """``DataLoader(..., autotune=AutotuneOptions(...))``; ``autotune=True`` takes these
    defaults. ``num_workers`` is the ceiling: that many workers start, autotune chooses how
    many of them take tasks.

    Args:
        min_workers: never fewer workers taking tasks.
        initial_workers: workers taking tasks when the first epoch starts; None: as many
            as this process has CPUs, at most the ceiling (a CPU-bound dataset needs no
            more; an I/O-bound one gets more within a few batches).
        cpu_budget: CPUs the workers may keep busy at once (a worker counts by its measured
            CPU share, so workers waiting on I/O cost little); None: the CPUs this process
            may use.
        memory_budget_bytes: most bytes of batches in flight (measured per batch from
            process workers); None: no limit beyond ``max_prefetch_factor``. The remote
            read-ahead autotune adds keeps each reader within ``memory_budget_bytes /
            (2 * num_workers)`` (a worker reads its current object and opens the next).
        target_wait_share: the loop may wait for data this share of its time; above it,
            autotune adds workers (or depth, or remote read-ahead).
        headroom: spare capacity kept above the step's need (variance in task time);
            a worker retires only while twice this headroom remains.
        window_batches: batches between two decisions once settled; while the loop may be
            short (at the start, after a change upward) it decides every quarter window.
        max_prefetch_factor: most tasks in flight per worker taking tasks.
        max_read_ahead: most blocks autotune lets each remote reader keep requested ahead
            when the workers wait on remote reads (`conveyor.storage.read_window`;
            memory: up to this many blocks per open object, within the memory budget);
            0: never raise it.
    """

    __slots__ = (
        "cpu_budget",
        "headroom",
        "initial_workers",
        "max_prefetch_factor",
        "max_read_ahead",
        "memory_budget_bytes",
        "min_workers",
        "target_wait_share",
        "window_batches",
    )
    min_workers: int
    initial_workers: int | None
    cpu_budget: float | None
    memory_budget_bytes: int | None
    target_wait_share: float
    headroom: float
    window_batches: int
    max_prefetch_factor: int
    max_read_ahead: int

    def __init__(
        self,
        *,
        min_workers: int = 1,
        initial_workers: int | None = None,
        cpu_budget: float | None = None,
        memory_budget_bytes: int | None = None,
        target_wait_share: float = 0.02,
        headroom: float = 0.2,
        window_batches: int = 8,
        max_prefetch_factor: int = 8,
        max_read_ahead: int = WIDEST_READ_AHEAD,
    ) -> None:
        if min_workers < 1 or (initial_workers is not None and initial_workers < 1):
            raise ValueError(
                "autotune min_workers and initial_workers should be >= 1, got "
                f"{min_workers} and {initial_workers}"
            )
        if cpu_budget is not None and cpu_budget <= 0:
            raise ValueError(f"autotune cpu_budget should be > 0 CPUs, got {cpu_budget}")
        if memory_budget_bytes is not None and memory_budget_bytes <= 0:
            raise ValueError(
                f"autotune memory_budget_bytes should be > 0, got {memory_budget_bytes}"
            )
        if not 0 < target_wait_share < 1:
            raise ValueError(
                f"autotune target_wait_share should be in (0, 1), got {target_wait_share}"
            )
        if window_batches < 1 or max_prefetch_factor < 1 or headroom < 0 or max_read_ahead < 0:
            raise ValueError(
                "autotune window_batches and max_prefetch_factor should be >= 1, headroom and "
                f"max_read_ahead >= 0, got {window_batches}, {max_prefetch_factor}, "
                f"{headroom}, {max_read_ahead}"
            )
        self._set(locals())


def autotune_options(value: bool | AutotuneOptions | None) -> AutotuneOptions | None:
    """``autotune=`` as given to the DataLoader: False/None off, True the defaults."""
    if value is None or value is False:
        return None
    if value is True:
        return AutotuneOptions()
    if isinstance(value, AutotuneOptions):
        return value
    raise ValueError(
        f"autotune should be a bool or conveyor.AutotuneOptions, got {type(value).__name__}"
    )
