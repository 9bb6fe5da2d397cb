"""DataLoader argument checks, with torch's messages (and conveyor's own arguments)."""

from __future__ import annotations

import multiprocessing
import os
import warnings
from multiprocessing.context import BaseContext

import torch

WORKER_TYPES = ("process", "thread")


def warn_if_too_many_workers(num_workers: int) -> None:
    """torch's warning when more worker processes are asked for than CPUs are usable."""
    try:
        suggested: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        suggested = os.cpu_count()
    if suggested is not None and num_workers <= suggested:
        return
    detail = (
        f"Our suggested max number of worker in current system is {suggested}, which is "
        "smaller than what this DataLoader is going to create."
        if suggested is not None
        else "DataLoader is not able to compute a suggested max number of worker."
    )
    warnings.warn(
        f"This DataLoader will create {num_workers} worker processes in total. "
        f"{detail} Please be aware that excessive worker creation might get DataLoader "
        "running slow or even freeze, lower the worker number to avoid potential "
        "slowness/freeze if necessary.",
        UserWarning,
        stacklevel=4,
    )


def warn_if_cuda_before_fork(context: BaseContext | None) -> None:
    """Forked workers cannot use CUDA once the parent initialised it: say so up front."""
    method = (context or multiprocessing.get_context()).get_start_method()
    if method == "fork" and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        warnings.warn(
            "CUDA is initialised in this process and the DataLoader's workers will be forked: "
            "any CUDA call in a worker fails ('Cannot re-initialize CUDA in forked "
            "subprocess'). Keep CUDA out of the dataset, or pass "
            "multiprocessing_context='spawn' (conveyor starts spawn workers from one zygote, "
            "so it stays fast).",
            UserWarning,
            stacklevel=4,
        )


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


def check_worker_args(
    num_workers: int, timeout: float, prefetch_factor: int | None, persistent_workers: bool
) -> None:
    if num_workers < 0:
        raise ValueError(
            "num_workers option should be non-negative; use num_workers=0 to disable "
            "multiprocessing."
        )
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError(
            "prefetch_factor option could only be specified in multiprocessing. Let "
            "num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None."
        )
    if prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError("prefetch_factor option should be non-negative")
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")


def check_snapshot_steps(steps: int | None) -> None:
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps <= 0):
        raise ValueError(
            "snapshot_every_n_steps should be a positive integer or None, but got "
            f"snapshot_every_n_steps={steps!r}"
        )


def resolve_worker_type(worker_type: str | None, worker_method: str | None) -> str:
    if worker_type is not None and worker_method is not None and worker_type != worker_method:
        raise ValueError(
            f"worker_type={worker_type!r} and its alias worker_method={worker_method!r} "
            "disagree; pass only worker_type"
        )
    chosen = worker_type or worker_method or "process"
    if chosen not in WORKER_TYPES:
        raise ValueError(f"worker_type should be one of {WORKER_TYPES}, but got {chosen!r}")
    return chosen


ON_ERROR_POLICIES = ("raise", "skip")


def check_on_error(on_error: str, max_skipped: int | None, iterable_style: bool) -> bool:
    """Validate the bad-sample policy; returns whether bad samples are skipped."""
    if on_error not in ON_ERROR_POLICIES:
        raise ValueError(f"on_error should be one of {ON_ERROR_POLICIES}, but got {on_error!r}")
    if max_skipped is not None and (not isinstance(max_skipped, int) or max_skipped < 0):
        raise ValueError(f"max_skipped should be None or an int >= 0, but got {max_skipped!r}")
    if on_error == "skip" and iterable_style:
        raise ValueError(
            "on_error='skip' applies to map-style datasets: a stream cannot go on after its "
            "iterator raised. Give the stream its own policy (e.g. "
            "conveyor.TarShards(..., on_error='skip'))."
        )
    return on_error == "skip"
