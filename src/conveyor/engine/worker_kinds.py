"""The factory of worker kinds: the one place that maps ``worker_type`` to a strategy.

Adding a kind is one class that follows `WorkerKind` and one entry in `WORKER_KINDS`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from conveyor.engine.process_workers import ProcessWorkers
from conveyor.engine.thread_workers import ThreadWorkers
from conveyor.engine.worker_kind import WorkerKind

__all__ = ["WORKER_KINDS", "resolve_worker_type", "worker_kind"]


def _ray_workers(
    ray_remote_args: Mapping[str, Any] | None = None, max_worker_restarts: int | None = None
) -> WorkerKind:
    # Loaded on first use: most loaders never run on Ray (ray itself is imported even
    # later, when the pool starts).
    from conveyor.engine.ray_workers import RayWorkers

    return RayWorkers(ray_remote_args, max_worker_restarts)


WORKER_KINDS: dict[str, Callable[[], WorkerKind]] = {
    "process": ProcessWorkers,
    "thread": ThreadWorkers,
    "ray": _ray_workers,
}


def resolve_worker_type(
    worker_type: str | None, worker_method: str | None, context: object = None
) -> str:
    """``worker_type`` or its alias ``worker_method``, checked; ``"process"`` by default,
    ``"thread"`` for a ``multiprocessing_context`` that starts threads (see
    `context_starts_threads`).

    ``worker_method`` also takes torch's name for processes, ``"multiprocessing"``."""
    if worker_method == "multiprocessing":
        worker_method = "process"
    if worker_type is not None and worker_method is not None and worker_type != worker_method:
        raise ValueError(
            f"worker_type={worker_type!r} and its alias worker_method={worker_method!r} "
            "disagree; pass only worker_type"
        )
    chosen = worker_type or worker_method
    if context_starts_threads(context):
        if chosen not in (None, "thread"):
            raise ValueError(
                f"multiprocessing_context={context!r} starts its workers as threads (its "
                f"Process is a threading.Thread), but worker_type={chosen!r}; pass "
                "worker_type='thread' or a context of processes"
            )
        chosen = "thread"
    chosen = chosen or "process"
    if chosen not in WORKER_KINDS:
        raise ValueError(f"worker_type should be one of {tuple(WORKER_KINDS)}, but got {chosen!r}")
    return chosen


def context_starts_threads(context: object) -> bool:
    """True for a multiprocessing context whose ``Process`` is a `threading.Thread`.

    torch's loader only calls ``start``/``is_alive``/``join`` on its workers, so a context
    can swap in threads (MONAI's ``ThreadDataLoader(use_thread_workers=True)`` does). Such
    workers share this process: conveyor runs them as its thread workers, which watch
    their workers without the exit codes and sentinels of real processes.
    """
    process = getattr(context, "Process", None)
    return isinstance(process, type) and issubclass(process, threading.Thread)


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
        return _ray_workers(ray_remote_args, max_worker_restarts)
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
