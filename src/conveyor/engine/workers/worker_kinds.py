"""The factory of worker kinds: the one place that maps ``worker_type`` to a strategy.

Adding a kind is one class that follows `WorkerKind` and one entry in `WORKER_KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from conveyor.engine.workers.process_workers import ProcessWorkers
from conveyor.engine.workers.thread_workers import ThreadWorkers
from conveyor.engine.workers.worker_kind import WorkerKind

__all__ = ["WORKER_KINDS", "resolve_worker_type", "worker_kind"]


def _ray_workers(
    ray_remote_args: Mapping[str, Any] | None = None, max_worker_restarts: int = 0
) -> WorkerKind:
    # Loaded on first use: most loaders never run on Ray (ray itself is imported even
    # later, when the pool starts).
    from conveyor.engine.workers.ray_workers import RayWorkers

    return RayWorkers(ray_remote_args, max_worker_restarts)


WORKER_KINDS: dict[str, Callable[[], WorkerKind]] = {
    "process": ProcessWorkers,
    "thread": ThreadWorkers,
    "ray": _ray_workers,
}


def resolve_worker_type(worker_type: str | None, worker_method: str | None) -> str:
    """``worker_type`` or its alias ``worker_method``, checked; ``"process"`` by default.

    ``worker_method`` also takes torch's name for processes, ``"multiprocessing"``."""
    if worker_method == "multiprocessing":
        worker_method = "process"
    if worker_type is not None and worker_method is not None and worker_type != worker_method:
        raise ValueError(
            f"worker_type={worker_type!r} and its alias worker_method={worker_method!r} "
            "disagree; pass only worker_type"
        )
    chosen = worker_type or worker_method or "process"
    if chosen not in WORKER_KINDS:
        raise ValueError(f"worker_type should be one of {tuple(WORKER_KINDS)}, but got {chosen!r}")
    return chosen


def worker_kind(
    name: str,
    ray_remote_args: Mapping[str, Any] | None = None,
    max_worker_restarts: int | None = None,
) -> WorkerKind:
    """A new strategy of kind ``name`` for one loader (it may keep a zygote).

    ``ray_remote_args`` and ``max_worker_restarts`` belong to ``worker_type="ray"``; given
    with another kind they are an error, not silently ignored.
    """
    name = resolve_worker_type(name, None)
    if name == "ray":
        return _ray_workers(ray_remote_args, max_worker_restarts or 0)
    for argument, value in (
        ("ray_remote_args", ray_remote_args),
        ("max_worker_restarts", max_worker_restarts),
    ):
        if value is not None:
            raise ValueError(
                f"{argument} applies to worker_type='ray' only, but worker_type={name!r}; "
                f"pass worker_type='ray' or drop {argument}"
            )
    return WORKER_KINDS[name]()
