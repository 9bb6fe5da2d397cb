"""engine.pin_thread with a fake pool and a fake pin function (no accelerator needed)."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest

from conveyor.engine.workers import messages as msg
from conveyor.engine.workers.messages import Reply
from conveyor.engine.workers.pin_thread import PinningPool
from conveyor.engine.workers.pool import WorkerDiedError
from conveyor.engine.workers.remote_error import RemoteError

_INTERRUPT = object()


class FakePool:
    """Results come from a queue the test feeds; ``interrupt`` wakes a blocked receive."""

    def __init__(self) -> None:
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.sent: list[tuple[int, Any]] = []
        self.bytes_received = 0
        self.closed = threading.Event()
        self.receiving = threading.Event()

    def send(self, worker_id: int, message: Any) -> None:
        self.sent.append((worker_id, message))

    def retire(self, worker_id: int) -> None:
        self.sent.append((worker_id, None))

    def receive(self, timeout_s: float | None) -> list[tuple[int, Any]]:
        self.receiving.set()
        item = self.results.get(timeout=timeout_s)
        if item is _INTERRUPT:
            return []
        if isinstance(item, BaseException):
            raise item
        return [item]

    def interrupt(self) -> None:
        self.results.put(_INTERRUPT)

    def close(self, grace: bool = True) -> None:
        self.closed.set()


def _pin(data: Any) -> Any:
    if data == "bad":
        raise ValueError("cannot pin this")
    return ("pinned", data, threading.current_thread().name)


def test_results_are_pinned_in_the_thread_in_arrival_order() -> None:
    inner = FakePool()
    pool = PinningPool(inner, _pin)
    for task_id in range(5):
        inner.results.put((task_id % 2, Reply(task_id, msg.OK, f"batch{task_id}")))
    inner.results.put((0, Reply(msg.NO_TASK, msg.RESUMED)))  # not data: passed through
    got: list[tuple[int, Any]] = []
    while len(got) < 6:
        got += pool.receive(timeout_s=10)
    assert [m.task_id for _, m in got] == [0, 1, 2, 3, 4, msg.NO_TASK]
    assert got[3] == (1, Reply(3, msg.OK, ("pinned", "batch3", "conveyor-pin-memory")))
    assert got[5] == (0, Reply(msg.NO_TASK, msg.RESUMED))
    pool.send(1, "task")
    pool.retire(0)
    assert inner.sent == [(1, "task"), (0, None)]
    pool.close()
    assert inner.closed.is_set() and not pool.thread.is_alive()


def test_a_pin_error_is_that_batch_s_error() -> None:
    inner = FakePool()
    pool = PinningPool(inner, _pin)
    inner.results.put((0, Reply(7, msg.OK, "bad")))
    [(worker_id, (task_id, status, payload, _))] = pool.receive(timeout_s=10)
    assert (worker_id, task_id, status) == (0, 7, msg.ERROR)
    assert isinstance(payload, RemoteError)
    with pytest.raises(ValueError, match="in pin memory thread"):
        payload.reraise()
    pool.close()


def test_a_dead_worker_is_raised_now_and_later() -> None:
    inner = FakePool()
    pool = PinningPool(inner, _pin)
    inner.results.put(WorkerDiedError("worker 1 was killed"))
    for _ in range(2):
        with pytest.raises(WorkerDiedError, match="worker 1"):
            pool.receive(timeout_s=10)
    pool.close()
    assert not pool.thread.is_alive()


def test_receive_times_out_with_nothing() -> None:
    inner = FakePool()
    pool = PinningPool(inner, _pin)
    assert pool.receive(timeout_s=0.01) == []
    pool.close()


def test_close_interrupts_a_blocked_thread_promptly_and_is_idempotent() -> None:
    inner = FakePool()
    pool = PinningPool(inner, _pin)
    assert inner.receiving.wait(10)  # the thread is blocked inside receive
    pool.close()
    assert not pool.thread.is_alive() and inner.closed.is_set()
    pool.close()
