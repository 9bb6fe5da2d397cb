"""The pin-memory thread: batches are pinned as they arrive, before the loop asks for them.

`PinningPool` wraps a worker pool (the strategy is picked once, when the iterator starts):
a background thread receives every result from the inner pool, copies ``OK`` payloads
into pinned memory with the pin function it was given, and queues them for the iterator.
Pinning then overlaps with the training step, as in torch. The pin function is injected,
so the thread can be tested on a machine without an accelerator.
"""

from __future__ import annotations

import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import torch

from conveyor.engine.workers import messages as msg
from conveyor.engine.workers.messages import Reply, WorkerMessage
from conveyor.engine.workers.remote_error import RemoteError
from conveyor.transport.pinning import MPS_UNSUPPORTED_WARNING, NO_ACCELERATOR_WARNING

__all__ = [
    "JOIN_TIMEOUT_S",
    "PIN_THREAD_NAME",
    "InterruptiblePool",
    "PinningPool",
    "warn_unpinnable",
]

JOIN_TIMEOUT_S = 5.0
PIN_THREAD_NAME = "conveyor-pin-memory"
WHERE = "in pin memory thread"


class InterruptiblePool(Protocol):
    """A worker pool whose blocking ``receive`` another thread can cut short."""

    def send(self, worker_id: int, message: WorkerMessage) -> None: ...

    def receive(self, timeout_s: float | None) -> list[tuple[int, Reply]]: ...

    def retire(self, worker_id: int) -> None: ...

    @property
    def bytes_received(self) -> int: ...

    def interrupt(self) -> None:
        """Make a ``receive`` blocked in another thread return soon (maybe with nothing)."""

    def close(self, grace: bool = True) -> None: ...


def warn_unpinnable() -> None:
    """torch's warning when ``pin_memory=True`` cannot pin here; loading carries on."""
    accelerator = (
        torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    )
    if accelerator is not None and accelerator.type == "mps":
        warnings.warn(MPS_UNSUPPORTED_WARNING, UserWarning, stacklevel=3)
    else:
        warnings.warn(NO_ACCELERATOR_WARNING, UserWarning, stacklevel=3)


class _Failure:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


def _pinned(reply: Reply, pin: Callable[[Any], Any]) -> Reply:
    if reply.status != msg.OK:
        return reply
    try:
        return reply._replace(payload=pin(reply.payload))
    except Exception:
        return Reply(reply.task_id, msg.ERROR, RemoteError(WHERE), reply.info)


def _pin_loop(
    pool: InterruptiblePool,
    pin: Callable[[Any], Any],
    ready: queue.SimpleQueue[Any],
    stop: threading.Event,
) -> None:
    """Receive, pin, hand over; until ``stop`` is set (and the pool interrupted)."""
    try:
        while not stop.is_set():
            for worker_id, message in pool.receive(None):
                ready.put((worker_id, _pinned(message, pin) if not stop.is_set() else message))
    except BaseException as exc:  # a dead worker, or a pool closed under us: tell the reader
        ready.put(_Failure(exc))


class PinningPool:
    """A `WorkerPool` whose results are pinned by a background thread.

    The thread is the only caller of the inner pool's ``receive``; ``send`` and ``retire``
    go straight to the inner pool from the caller's thread (the inner pool must allow
    that). When idle, the thread blocks in the inner ``receive`` (no polling). ``close()``
    (idempotent; the owning iterator also runs it on garbage collection) stops the thread
    via ``interrupt()``, joins it, then closes the inner pool. Errors raised by ``pin`` are
    delivered as that batch's error; a failure of the inner pool (a worker died) is raised
    from every later ``receive``.
    """

    def __init__(self, pool: InterruptiblePool, pin: Callable[[Any], Any]):
        self._pool = pool
        self._ready: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(
            target=_pin_loop,
            args=(pool, pin, self._ready, self._stop),
            name=PIN_THREAD_NAME,
            daemon=True,
        )
        self._thread.start()

    def send(self, worker_id: int, message: WorkerMessage) -> None:
        self._pool.send(worker_id, message)

    def retire(self, worker_id: int) -> None:
        self._pool.retire(worker_id)

    @property
    def bytes_received(self) -> int:
        return self._pool.bytes_received

    def receive(self, timeout_s: float | None) -> list[tuple[int, Reply]]:
        """Pinned results, waiting up to ``timeout_s`` for the first one."""
        if self._failure is not None:
            raise self._failure
        try:
            items = [self._ready.get(timeout=timeout_s)]
        except queue.Empty:
            return []
        while True:
            try:
                items.append(self._ready.get_nowait())
            except queue.Empty:
                break
        results = []
        for item in items:
            if isinstance(item, _Failure):
                self._failure = item.exc
                raise item.exc
            results.append(item)
        return results

    @property
    def handles(self) -> Any:
        """The inner pool's worker views (torch's ``iterator._workers``), if it has any."""
        return getattr(self._pool, "handles", [])

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def close(self, grace: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._pool.interrupt()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=JOIN_TIMEOUT_S)
        self._pool.close(grace)
