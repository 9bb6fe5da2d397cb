"""Ending child processes, the one way every owner does it, and saying how one ended.

Owners (worker pools, the zygote, DataPipe processes) first ask politely in their own
protocol, then call `stop_processes`: wait, terminate, wait, kill. See
docs/design/shutdown.md.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["describe_exit", "stop_processes", "torch_first_sentence"]


def describe_exit(exitcode: int | None) -> str:
    """``"was killed by signal 9 (SIGKILL)"``, ``"exited with code 1"``, ..."""
    if exitcode is None:
        return "is not responding"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by signal {-exitcode} ({name})"
    return f"exited with code {exitcode}"


def torch_first_sentence(pid: int, exitcode: int) -> str:
    """torch's wording for a worker killed by a signal (users' code and tests match it);
    empty for an ordinary exit, which conveyor's own sentence describes."""
    if exitcode >= 0:
        return ""
    try:
        name = signal.strsignal(-exitcode) or f"signal {-exitcode}"
    except ValueError:
        name = f"signal {-exitcode}"
    return f"DataLoader worker (pid {pid}) is killed by signal: {name}. "


def stop_processes(processes: Sequence[Any], join_timeout_s: float) -> None:
    """Once asked to stop: give them ``join_timeout_s`` together, then terminate those
    still running, wait as long again, and kill what is left. Each must offer ``join``,
    ``exitcode``, ``terminate`` and ``kill`` (a `multiprocessing.Process` does)."""
    deadline = time.monotonic() + join_timeout_s
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.exitcode is None:
            process.terminate()
    for process in processes:
        process.join(timeout=join_timeout_s)
        if process.exitcode is None:
            process.kill()
            process.join()
