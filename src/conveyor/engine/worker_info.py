"""Who am I? ``get_worker_info()`` for process and thread workers."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from conveyor.torch_compat import publish_worker_info

__all__ = ["WorkerInfo", "get_worker_info"]


@dataclass(frozen=True)
class WorkerInfo:
    """Same as `torch.utils.data.WorkerInfo`: id, num_workers, seed and the worker's dataset.

    Differences: it is a frozen dataclass (torch forbids setting attributes after
    construction too) and carries ``worker_type`` (``"process"`` or ``"thread"``).
    """

    id: int
    num_workers: int
    seed: int
    dataset: Any
    worker_type: str = "process"


# A process worker sets the process-wide value; a thread worker sets a thread-local one so
# that several thread workers in one process each see their own id.
_process_info: WorkerInfo | None = None
_thread_info = threading.local()


def get_worker_info() -> WorkerInfo | None:
    """Same as `torch.utils.data.get_worker_info`: `WorkerInfo` in a worker, else ``None``."""
    info: WorkerInfo | None = getattr(_thread_info, "info", None)
    return info if info is not None else _process_info


def install_worker_info(info: WorkerInfo) -> None:
    """Called once at the start of a worker, before any user code runs."""
    global _process_info
    if info.worker_type == "thread":
        _thread_info.info = info
    else:
        _process_info = info
        publish_worker_info(info)


def clear_worker_info() -> None:
    """Called when a thread worker ends (process workers simply exit)."""
    _thread_info.info = None
