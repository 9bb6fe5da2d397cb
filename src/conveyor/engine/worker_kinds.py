"""The factory of worker kinds: the one place that maps ``worker_type`` to a strategy.

Adding a kind is one class that follows `WorkerKind` and one entry in `WORKER_KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable

from conveyor.engine.process_workers import ProcessWorkers
from conveyor.engine.thread_workers import ThreadWorkers
from conveyor.engine.worker_kind import WorkerKind

__all__ = ["WORKER_KINDS", "resolve_worker_type", "worker_kind"]

WORKER_KINDS: dict[str, Callable[[], WorkerKind]] = {
    "process": ProcessWorkers,
    "thread": ThreadWorkers,
}


def resolve_worker_type(worker_type: str | None, worker_method: str | None) -> str:
    """``worker_type`` or its alias ``worker_method``, checked; ``"process"`` by default."""
    if worker_type is not None and worker_method is not None and worker_type != worker_method:
        raise ValueError(
            f"worker_type={worker_type!r} and its alias worker_method={worker_method!r} "
            "disagree; pass only worker_type"
        )
    chosen = worker_type or worker_method or "process"
    if chosen not in WORKER_KINDS:
        raise ValueError(f"worker_type should be one of {tuple(WORKER_KINDS)}, but got {chosen!r}")
    return chosen


def worker_kind(name: str) -> WorkerKind:
    """A new strategy of kind ``name`` for one loader (it may keep a zygote)."""
    return WORKER_KINDS[resolve_worker_type(name, None)]()
