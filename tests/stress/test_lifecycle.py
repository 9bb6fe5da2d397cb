"""Loader lifecycles that cross forks and threads: inert copies, many loaders at once."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import traceback
from typing import Any

import psutil
import pytest

from conveyor import DataLoader

from sample_datasets import Range


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_an_iterator_copied_into_a_forked_child_is_inert_there(worker_type: str) -> None:
    """A forked child (a later loader's worker, say) that closes or collects its copy of
    a live iterator must not stop the parent's workers or unlink its shared memory."""
    loader = DataLoader(
        Range(40), batch_size=4, num_workers=2, worker_type=worker_type, persistent_workers=True
    )
    it = iter(loader)
    first = next(it)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what __del__ would do there, then report
        status = 0
        try:
            it.close()  # type: ignore[attr-defined]
            del it
        except BaseException:
            status = 1
        os.write(write, bytes([status]))
        os._exit(status)
    os.close(write)
    assert os.read(read, 1) == b"\x00"
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    rest = [int(x) for batch in it for x in batch]
    assert [int(x) for x in first] + rest == list(range(40))  # the workers never noticed


def _consume(loaders: list[DataLoader[int]], seconds: float, errors: list[BaseException]) -> None:
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for loader in loaders:
                assert sorted(int(x) for batch in loader for x in batch) == list(range(64))
    except BaseException as error:  # reported by the test, in the main thread
        errors.append(error)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_eight_loaders_in_eight_threads_finish_and_release() -> None:
    """8 loaders x 2 workers consumed from 8 threads (the table's 60 s case; 10 s here by
    default, CONVEYOR_STRESS_SECONDS for longer): all finish, all release within 2 s."""
    seconds = float(os.environ.get("CONVEYOR_STRESS_SECONDS", "10"))
    before = {child.pid for child in psutil.Process().children()}  # servers of fixtures
    loaders = [DataLoader(Range(64), batch_size=8, num_workers=2) for _ in range(8)]
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_consume, args=([loader], seconds, errors)) for loader in loaders
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds + 60
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    stuck = [t for t in threads if t.is_alive()]
    assert not stuck, "a consumer thread never finished:\n" + _stacks(stuck)
    assert not errors, errors
    released_at = time.monotonic()
    del loaders
    gc.collect()
    left = [
        child
        for child in psutil.Process().children()
        if child.pid not in before and _is_worker(child)
    ]
    _, alive = psutil.wait_procs(left, timeout=2.0)
    assert not alive and time.monotonic() - released_at < 2.5


def _stacks(threads: list[threading.Thread]) -> str:
    """Where the stuck threads wait (a hang's one useful clue, printed with the failure)."""
    frames = sys._current_frames()
    return "\n".join(
        f"--- {t.name}\n" + "".join(traceback.format_stack(frames[t.ident]))
        for t in threads
        if t.ident in frames
    )


def _is_worker(process: Any) -> bool:
    """Not multiprocessing's own long-lived helpers (resource tracker, fork server)."""
    try:
        return "multiprocessing" not in " ".join(process.cmdline())
    except psutil.Error:
        return False
