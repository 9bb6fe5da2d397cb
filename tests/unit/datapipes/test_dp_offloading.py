"""``prefetch`` (thread) and ``run_in_process``: same output, clean shutdown, errors, the RFC demo.

The suite-wide leak guard (tests/conftest.py) also fails any test that leaves a thread,
child process or file descriptor behind; the explicit checks here make the intent visible.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conveyor.datapipes import IterDataPipe, NotAvailable
from conveyor.datapipes.iter import IterableWrapper

FORK = multiprocessing.get_context("fork")


def mult100(x: int) -> int:
    return x * 100


def mult111(x: int) -> int:
    return x * 111


def explode_at_3(x: int) -> int:
    if x == 3:
        raise KeyError("boom at 3")
    return x


class Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(a, b)


def raise_unpicklable(x: int) -> int:
    raise Unpicklable(1, 2)


def suicide_at_2(x: int) -> int:
    if x == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def in_process(dp: IterDataPipe[Any], buffer_size: int = 4) -> IterDataPipe[Any]:
    return dp.run_in_process(buffer_size, multiprocessing_context=FORK)


Offload = Callable[[IterDataPipe[Any]], IterDataPipe[Any]]
OFFLOADS: dict[str, Offload] = {
    "prefetch": lambda dp: dp.prefetch(3),
    "prefetch-1": lambda dp: dp.prefetch(1),
    "process": in_process,
}


def baseline() -> tuple[int, list[Any]]:
    gc.collect()
    return threading.active_count(), multiprocessing.active_children()


def assert_nothing_left(before: tuple[int, list[Any]]) -> None:
    gc.collect()
    assert threading.active_count() == before[0]
    assert multiprocessing.active_children() == before[1]


@pytest.mark.parametrize("name", sorted(OFFLOADS))
def test_output_identical_to_inline(name: str) -> None:
    def build() -> IterDataPipe[Any]:
        return IterableWrapper(range(40)).map(mult100).shuffle(buffer_size=5).set_seed(3).batch(3)

    inline = list(build())
    before = baseline()
    assert list(OFFLOADS[name](build())) == inline
    assert_nothing_left(before)


@pytest.mark.parametrize("name", sorted(OFFLOADS))
def test_early_break_stops_the_worker(name: str) -> None:
    before = baseline()
    dp = OFFLOADS[name](IterableWrapper(range(1000)))
    for i, _ in enumerate(dp):
        if i == 5:
            break
    assert threading.active_count() == before[0]
    assert multiprocessing.active_children() == before[1]
    assert list(dp)[:3] == [0, 1, 2]  # a new pass starts cleanly
    assert_nothing_left(before)


@pytest.mark.parametrize("name", sorted(OFFLOADS))
def test_garbage_collected_pipe_stops_the_worker(name: str) -> None:
    before = baseline()
    dp = OFFLOADS[name](IterableWrapper(range(1000)))
    while True:
        try:
            assert dp.nonblocking_next() == 0
            break
        except NotAvailable as pending:
            pending.wait(5)
    assert threading.active_count() > before[0]
    del dp
    assert_nothing_left(before)


@pytest.mark.parametrize("name", sorted(OFFLOADS))
def test_errors_keep_their_type(name: str) -> None:
    before = baseline()
    dp = OFFLOADS[name](IterableWrapper(range(10)).map(explode_at_3))
    out = []
    with pytest.raises(KeyError, match="boom at 3"):
        for x in dp:
            out.append(x)
    assert out == [0, 1, 2]
    assert_nothing_left(before)


def test_unpicklable_error_from_a_process_still_arrives() -> None:
    dp = in_process(IterableWrapper(range(3)).map(raise_unpicklable))
    with pytest.raises(RuntimeError, match="Unpicklable"):
        list(dp)


def test_killed_process_is_reported_not_hung() -> None:
    before = baseline()
    dp = in_process(IterableWrapper(range(10)).map(suicide_at_2), buffer_size=1)
    with pytest.raises(RuntimeError, match="SIGKILL"):
        list(dp)
    assert_nothing_left(before)


def test_reset_and_close_release_workers() -> None:
    before = baseline()
    dp = IterableWrapper(range(100)).prefetch(2).map(mult100)
    it = iter(dp)
    assert next(it) == 0
    dp.reset()
    assert threading.active_count() == before[0]
    assert list(dp)[:2] == [0, 100]
    it = iter(dp)
    assert next(it) == 0
    assert threading.active_count() > before[0]
    dp.close()
    assert threading.active_count() == before[0]
    assert_nothing_left(before)


def test_nested_thread_inside_process() -> None:
    dp = in_process(IterableWrapper(range(30)).prefetch(2).map(mult100))
    assert list(dp) == [x * 100 for x in range(30)]


def test_rfc_users_example() -> None:
    """A source copied three ways, two copies mapped, greedily joined (RFC #49440)."""
    before = baseline()

    def joined(offload: bool) -> IterDataPipe[Any]:
        dp1, dp2, dp3 = IterableWrapper(range(50)).fork(3)
        dp2_modified, dp3_modified = dp2.map(mult100), dp3.map(mult111)
        if offload:
            dp2_modified, dp3_modified = dp2_modified.prefetch(4), in_process(dp3_modified)
        return dp1.greedy_join(dp2_modified, dp3_modified)

    expected = Counter(
        list(range(50)) + [x * 100 for x in range(50)] + [x * 111 for x in range(50)]
    )
    inline = list(joined(False))
    assert inline[:9] == [0, 0, 0, 1, 100, 111, 2, 200, 222]  # in turn, as the RFC prints
    assert Counter(inline) == expected
    assert Counter(joined(True)) == expected
    assert_nothing_left(before)


def dataloader() -> Any:
    try:
        from conveyor.dataloader import DataLoader

        return DataLoader
    except ImportError:  # pragma: no cover - the lead's module is the target
        from torch.utils.data import DataLoader as TorchDataLoader

        return TorchDataLoader


def test_rfc_example_through_the_dataloader() -> None:
    loader_class = dataloader()
    dp1, dp2, dp3 = IterableWrapper(range(20)).fork(3)
    joined = dp1.greedy_join(dp2.map(mult100).prefetch(2), dp3.map(mult111))
    direct = Counter(int(x) for x in joined)
    loaded = Counter(int(x) for x in loader_class(joined, batch_size=None))
    assert loaded == direct
    assert sum(direct.values()) == 60


class Ticker(IterDataPipe[int]):
    """A source that is only ready after its gate opens: greedy_join must serve the other."""

    def __init__(self, gate: threading.Event, n: int) -> None:
        self.gate = gate
        self.n = n

    def __iter__(self) -> Iterator[int]:
        self.gate.wait(5)
        yield from range(1000, 1000 + self.n)


def test_greedy_join_serves_whatever_is_ready() -> None:
    gate = threading.Event()
    slow = Ticker(gate, 3).prefetch(2)
    fast = IterableWrapper(range(5))
    joined = slow.greedy_join(fast)
    it = iter(joined)
    first = [next(it) for _ in range(5)]
    assert first == [0, 1, 2, 3, 4]  # the slow input was never ready, nothing blocked
    gate.set()
    assert list(it) == [1000, 1001, 1002]


def test_process_runner_branch_needs_no_buffer_for_the_other_side() -> None:
    a, b = IterableWrapper(range(3000)).fork(2, buffer_size=100)
    joined = a.greedy_join(in_process(b.map(mult100), 8))
    out = Counter(joined)
    assert out == Counter(list(range(3000)) + [x * 100 for x in range(3000)])


def test_state_of_offloaded_pipes_resumes_without_loss() -> None:
    dp = IterableWrapper(range(20)).map(mult100).prefetch(5)
    it = iter(dp)
    head = [next(it) for _ in range(7)]
    state = dp.state_dict()
    resumed = IterableWrapper(range(20)).map(mult100).prefetch(5)
    resumed.load_state_dict(state)
    assert head + list(resumed) == [x * 100 for x in range(20)]


@pytest.mark.slow
def test_spawn_context() -> None:
    dp = IterableWrapper(range(10)).map(mult100).run_in_process(multiprocessing_context="spawn")
    assert list(dp) == [x * 100 for x in range(10)]


ORPHAN_SCRIPT = """
import os, sys
from conveyor.datapipes.iter import IterableWrapper

def slow(x):
    return x

if __name__ == "__main__":
    dp = IterableWrapper(range(10**6)).map(slow).run_in_process(2, multiprocessing_context="fork")
    it = iter(dp)
    next(it)
    import multiprocessing
    (child,) = multiprocessing.active_children()
    with open(sys.argv[1], "w") as out:
        out.write(str(child.pid))
    os._exit(0)  # die without any cleanup, as a killed trainer would
"""


@pytest.mark.slow
def test_child_process_exits_when_its_parent_dies(tmp_path: Any) -> None:
    import subprocess
    import sys
    import time

    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN_SCRIPT)
    pid_file = tmp_path / "child.pid"
    # No pipes to the script: an orphan holding them would stall run() instead of the check.
    subprocess.run(
        [sys.executable, str(script), str(pid_file)],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        timeout=30,
    )
    child_pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return
        threading.Event().wait(0.05)  # polling a foreign pid: there is nothing to wait on
    os.kill(child_pid, signal.SIGKILL)
    pytest.fail("the DataPipe process outlived its parent")
