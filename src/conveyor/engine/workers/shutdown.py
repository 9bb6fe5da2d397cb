"""Ending child processes, the one way every owner does it, and saying how one ended.

Owners (worker pools, the zygote, DataPipe processes) first ask politely in their own
protocol, then call `stop_processes`: wait, terminate, wait, kill. See
docs/design/shutdown.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["describe_exit", "stop_processes", "torch_first_sentence", "worker_death_message"]


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


_SIGNAL_HINTS = {
    9: "; the kernel's out-of-memory killer ends processes this way: lower batch_size, "
    "prefetch_factor or num_workers",
    11: "; a segfault points at a native library in the dataset code",
    7: "; a bus error in a worker is usually /dev/shm running out",
}


def worker_death_message(worker_id: int, pid: int, exitcode: int) -> str:
    """Why a worker is gone, each fact once: torch's first sentence for a signal (users and
    tests match it), then the worker's id, the signal's number and name and what to try."""
    if exitcode >= 0:
        return (
            f"DataLoader worker {worker_id} (pid {pid}) exited unexpectedly with code {exitcode}."
        )
    return (
        f"{torch_first_sentence(pid, exitcode)}It was worker {worker_id}, ended by "
        f"{describe_exit(exitcode).removeprefix('was killed by ')}"
        f"{_SIGNAL_HINTS.get(-exitcode, '')}."
    )


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


def stop_processes(processes: Sequence[Any], join_timeout_s: float, grace: bool = True) -> None:
    """Once asked to stop: give them ``join_timeout_s`` together (unless not ``grace``:
    they are stuck, e.g. after a timeout), then terminate those still running, wait as
    long again, and kill what is left. Each must offer ``pid``, ``join``, ``exitcode``,
    ``terminate`` and ``kill`` (a `multiprocessing.Process` does)."""
    if grace:
        deadline = time.monotonic() + join_timeout_s
        for process in processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.exitcode is None:
            process.terminate()
            _resume(process)
    for process in processes:
        process.join(timeout=join_timeout_s)
        if process.exitcode is None:
            process.kill()
            process.join()


def _resume(process: Any) -> None:
    """SIGCONT after SIGTERM: a stopped process (SIGSTOP, a debugger's) acts on the SIGTERM
    now instead of holding it until the kill a second later. A process not yet reaped keeps
    its pid, so the signal cannot reach another one."""
    resume = getattr(process, "resume", None)
    with contextlib.suppress(OSError, TypeError):
        if resume is not None:
            resume()
        else:
            os.kill(process.pid, signal.SIGCONT)
