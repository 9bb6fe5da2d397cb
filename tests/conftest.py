"""Leak guard: every test must leave no child process, thread, /dev/shm entry or fd behind."""

from __future__ import annotations

import gc
import os
import re
import threading
from collections.abc import Iterator
from typing import Protocol

import psutil
import pytest

from slow_test_notice import pytest_runtest_call  # noqa: F401  # a hook: "still running"

SHM_DIR = "/dev/shm"
# Threads that the interpreter or libraries start once per process and keep on purpose.
_LONG_LIVED_THREAD_PREFIXES = ("pydevd", "Thread-resource_sharer", "QueueFeederThread")
GRACE_S = 5.0


_SHM_PID = re.compile(r"(?:torch_|conveyor-)(\d+)")


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except FileNotFoundError:
        return set()


def _ours(entry: str, tree: set[int]) -> bool:
    """conveyor/torch entries named after our process tree (or a dead process) are ours."""
    match = _SHM_PID.search(entry)
    if match is None:
        return False  # e.g. sem.mp-*: neither conveyor nor torch tensors make these
    pid = int(match.group(1))
    return pid in tree or not psutil.pid_exists(pid)


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if not t.name.startswith(_LONG_LIVED_THREAD_PREFIXES)}


def _fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


@pytest.fixture(autouse=True, scope="session")
def _process_wide_helpers() -> None:
    """multiprocessing starts one resource tracker and one fork server per process, for good.

    Start them before any test so the leak guard counts them as the baseline.
    """
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    forkserver.ensure_running()


class _Owner(Protocol):
    """A long-lived fixture (a Ray cluster) that says which new processes/threads/fds are its."""

    def owns_process(self, process: psutil.Process) -> bool: ...
    def owns_thread(self, thread: threading.Thread) -> bool: ...
    def owns_fd(self, target: str) -> bool: ...


class _NoOwner:
    def owns_process(self, process: psutil.Process) -> bool:
        return False

    def owns_thread(self, thread: threading.Thread) -> bool:
        return False

    def owns_fd(self, target: str) -> bool:
        return False


def _owner(request: pytest.FixtureRequest) -> _Owner:
    """``@pytest.mark.leaks_owned_by("fixture")``: that fixture's value exempts what it owns."""
    marker = request.node.get_closest_marker("leaks_owned_by")
    if marker is None:
        return _NoOwner()
    owner: _Owner = request.getfixturevalue(marker.args[0])
    return owner


def _fd_open(fd: int) -> bool:
    """False for a number listed but closed since (the listing's own fd, shifted up when an
    owner's fd took its usual number)."""
    return os.path.lexists(f"/proc/self/fd/{fd}")


def _fd_target(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return str(fd)


@pytest.fixture(autouse=True)
def leak_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("allow_leaks"):
        yield
        return
    owner = _owner(request)
    me = psutil.Process()
    children_before = {p.pid for p in me.children(recursive=True)}
    threads_before = _threads()
    shm_before = _shm_entries()
    fds_before = _fds()
    yield
    if _fds() - fds_before or _threads() - threads_before:
        gc.collect()  # unreachable iterators close their workers when collected
    new_children = [
        p
        for p in me.children(recursive=True)
        if p.pid not in children_before and not owner.owns_process(p)
    ]
    tree = {me.pid} | {p.pid for p in new_children}
    _, alive = psutil.wait_procs(new_children, timeout=GRACE_S)
    for thread in _threads() - threads_before:
        thread.join(timeout=GRACE_S)
    leaked_threads = [
        t.name for t in _threads() - threads_before if t.is_alive() and not owner.owns_thread(t)
    ]
    leaked_shm = sorted(e for e in _shm_entries() - shm_before if _ours(e, tree))
    leaked_fds = sorted(
        fd for fd in _fds() - fds_before if _fd_open(fd) and not owner.owns_fd(_fd_target(fd))
    )
    for proc in alive:
        proc.kill()
    problems = []
    if alive:
        problems.append(f"child processes still running: {[p.pid for p in alive]}")
    if leaked_threads:
        problems.append(f"threads still running: {leaked_threads}")
    if leaked_shm:
        problems.append(f"/dev/shm entries left: {leaked_shm}")
    if leaked_fds:
        targets = [f"{fd}->{_fd_target(fd)}" for fd in leaked_fds]
        problems.append(f"file descriptors left open: {targets}")
    if problems:
        pytest.fail("leak guard: " + "; ".join(problems))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "allow_leaks: skip the leak guard (document why)")
    config.addinivalue_line(
        "markers",
        "leaks_owned_by(fixture): the guard leaves alone what that long-lived fixture's value "
        "owns (owns_process / owns_thread / owns_fd), and checks everything else",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Ray tests run last: a Ray driver leaves threads and state in this process for
    good (``ray.shutdown`` does not undo it all), which later tests should not share.
    ``gpu`` tests are skipped where CUDA is not available (scripts/gpu_check.sh runs them)."""
    items.sort(key=lambda item: item.get_closest_marker("ray") is not None)  # stable
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs CUDA (on a GPU machine: bash scripts/gpu_check.sh)")
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip)
