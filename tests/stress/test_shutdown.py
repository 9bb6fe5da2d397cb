"""Shutdown under fire: interrupts, a dying main process, many early exits, many epochs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from conveyor import DataLoader
from conveyor.transport.slab import process_prefix

from sample_datasets import Range

TESTS_DIR = Path(__file__).resolve().parent.parent

# A script that starts a loader whose workers block, prints their pids, then blocks in next().
_BLOCKED_LOADER = textwrap.dedent(
    """
    import signal, sys, os
    # a suite started in the background by a shell inherits SIGINT ignored, and Python then
    # keeps it ignored: take Ctrl-C as a terminal's process would
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, {tests_dir!r})
    from sample_datasets import BlockAt
    from conveyor import DataLoader
    loader = DataLoader(BlockAt(100, bad={bad}), batch_size=None, num_workers=2)
    it = iter(loader)
    assert next(it) == 0
    import psutil
    pids = " ".join(str(p.pid) for p in psutil.Process().children())
    try:
        print(pids, flush=True)
        for _ in it:
            pass
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        {after_interrupt}
    """
)


def _start(bad: int, after_interrupt: str = "pass") -> tuple[subprocess.Popen[str], list[int]]:
    script = _BLOCKED_LOADER.format(
        tests_dir=str(TESTS_DIR), bad=bad, after_interrupt=after_interrupt
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip():
        proc.kill()
        pytest.fail(f"loader script failed: {proc.communicate()[1]}")
    return proc, [int(pid) for pid in line.split()]


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    _, alive = psutil.wait_procs(procs, timeout=seconds)
    for proc in alive:
        proc.kill()
    return [p.pid for p in alive]


def test_keyboard_interrupt_ends_workers_promptly() -> None:
    proc, workers = _start(bad=1)
    assert len(workers) >= 2
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()  # and its workers, so that nothing leaks into the next test
        out, err = proc.communicate()
        _gone_within(workers, 5)
        pytest.fail(f"the interrupted loader did not exit in 30 s:\n{out}\n{err}")
    assert "interrupted" in out, err
    assert proc.returncode == 0, err
    assert _gone_within(workers, 5) == []
    assert time.monotonic() - start < 10


def test_workers_end_when_main_process_is_killed() -> None:
    proc, workers = _start(bad=1)  # one worker is stuck inside __getitem__ (sleeping)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    start = time.monotonic()
    assert _gone_within(workers, 10) == []
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_fifty_early_breaks_keep_resources_flat(worker_type: str) -> None:
    me = psutil.Process()

    def one_break() -> None:
        for i, _ in enumerate(
            DataLoader(Range(1000), batch_size=4, num_workers=2, worker_type=worker_type)
        ):
            if i == 5:
                break

    for _ in range(5):
        one_break()  # warm-up: allocator pools, lazily imported modules
    fds, rss = me.num_fds(), me.memory_info().rss
    children = {p.pid for p in me.children()}
    for _ in range(50):
        one_break()
    assert me.num_fds() <= fds
    assert me.memory_info().rss < rss + 30 * 2**20
    assert {p.pid for p in me.children()} == children


@pytest.mark.parametrize("persistent", [False, True])
def test_thirty_epochs_keep_resources_flat(persistent: bool) -> None:
    me = psutil.Process()
    loader = DataLoader(Range(64), batch_size=8, num_workers=2, persistent_workers=persistent)
    for _ in range(3):
        assert sum(len(b) for b in loader) == 64
    fds, rss = me.num_fds(), me.memory_info().rss
    for _ in range(30):
        assert sum(len(b) for b in loader) == 64
    assert me.num_fds() <= fds
    assert me.memory_info().rss < rss + 30 * 2**20
    del loader


_ALIVE_AT_EXIT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {tests_dir!r})
    from conveyor import DataLoader
    if __name__ == "__main__":
        it = iter(DataLoader(list(range(100)), batch_size=4, num_workers=2,
                             worker_type={worker_type!r}, persistent_workers={persistent}))
        print(next(it).tolist(), os.getpid(), flush=True)
    """
)


@pytest.mark.parametrize(
    ("worker_type", "persistent"), [("process", False), ("process", True), ("thread", False)]
)
def test_an_iterator_alive_at_interpreter_exit_closes_quietly(
    worker_type: str, persistent: bool
) -> None:
    """The script ends with its iterator mid-epoch: exit is clean (no 'Exception ignored'
    from a close that runs after multiprocessing's globals are gone) and leaves no slab."""
    script = _ALIVE_AT_EXIT.format(
        tests_dir=str(TESTS_DIR), worker_type=worker_type, persistent=persistent
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    batch, _, pid = proc.stdout.strip().rpartition(" ")
    assert batch == "[0, 1, 2, 3]"
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert [n for n in os.listdir("/dev/shm") if n.startswith(process_prefix(int(pid)))] == []
