"""The RFC's two-ended queue ("DataLoaderQueue") between exactly two endpoints.

A channel joins two endpoints, A and B: what A puts, B gets, and the other way round. Each
direction is a FIFO with these guarantees (RFC #49440):

- non-blocking: ``get(blocking=False)`` / ``put(..., blocking=False)`` raise `NotAvailable`
  instead of waiting; the exception carries the `Doorbell` to wait on before retrying;
- guaranteed delivery, no duplicates, order kept: messages arrive once, in put order, and
  messages already sent are still delivered after the sender closes;
- bounded: at most ``capacity`` undelivered messages per direction (a process channel adds
  the operating system's pipe buffer, which the request/response protocol of
  `conveyor.engine.offload.offload` keeps empty);
- exactly two endpoints: endpoints cannot be copied or pickled; a process channel hands
  the child one raw connection that it wraps with `connection_endpoint`.

After either side calls ``close()``, ``put`` raises `ChannelClosed` on both sides and
``get`` raises it once the inbox is drained. Endpoints are thread-safe.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

__all__ = [
    "ChannelClosed",
    "Doorbell",
    "Endpoint",
    "NotAvailable",
    "ProcessEndpoint",
    "connection_endpoint",
    "new_lock",
    "process_channel",
    "thread_channel",
]

_FALLBACK_WAIT_S = (0.0001, 0.01)  # backoff for a NotAvailable that carries no doorbell


class _CloseSignal:
    """Sent over a process channel when one side closes it (compared by type, never ==)."""


def _is_close(item: object) -> bool:
    return type(item) is _CloseSignal


class Doorbell:
    """A generation counter that wakes waiters when it moves (an event that never resets).

    ``ring()`` may be called from any thread. A waiter reads `generation` *before* checking
    for work, then calls ``wait(since=that_generation)``, so a ring between the check and
    the wait is never lost. ``forward_to(other)`` makes every ring also ring ``other``
    (held weakly), which is how a node waits on whichever of its inputs is ready first.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._generation = 0
        self._forwards: list[weakref.ref[Doorbell]] = []

    @property
    def generation(self) -> int:
        """How many times this bell has rung."""
        with self._cond:
            return self._generation

    def ring(self) -> None:
        """Wake every waiter and every bell this one forwards to."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()
            targets = [ref() for ref in self._forwards]
            self._forwards = [
                ref for ref, bell in zip(self._forwards, targets, strict=False) if bell
            ]
        for bell in targets:
            if bell is not None:
                bell.ring()

    def wait(self, since: int, timeout: float | None = None) -> bool:
        """Block until the generation differs from ``since``; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._generation != since, timeout)

    def forward_to(self, other: Doorbell) -> None:
        """Also ring ``other`` whenever this bell rings (idempotent, weak)."""
        with self._cond:
            if not any(ref() is other for ref in self._forwards):
                self._forwards.append(weakref.ref(other))


def new_lock() -> threading.RLock:
    """A (reentrant) mutex for pipeline state shared by pipes pulled from several threads."""
    return threading.RLock()


class NotAvailable(Exception):
    """No item is ready yet: try again later (the RFC's ``NotAvailable``).

    ``bell``/``since`` say when retrying is worthwhile; an instance without a bell (raised by
    user code) makes `wait` back off briefly instead.
    """

    def __init__(self, bell: Doorbell | None = None, since: int = 0) -> None:
        super().__init__("no item is available yet")
        self.bell = bell
        self.since = since

    def changed(self) -> bool:
        """True if the bell has rung since this exception was raised."""
        return self.bell is not None and self.bell.generation != self.since

    def wait(self, timeout: float | None = None, attempt: int = 0) -> None:
        """Block until retrying may succeed (or ``timeout`` seconds pass)."""
        if self.bell is not None:
            self.bell.wait(self.since, timeout)
            return
        low, high = _FALLBACK_WAIT_S
        delay = min(high, low * 2 ** min(attempt, 16))
        time.sleep(delay if timeout is None else min(delay, timeout))


class ChannelClosed(Exception):
    """The channel is closed (the RFC's ``QueueError``); nothing more will arrive."""


class Endpoint:
    """One end of a channel: ``put`` sends to the other end, ``get`` receives from it."""

    bell: Doorbell
    """Rings when an item arrives here, when room frees up for ``put``, or on close."""

    def put(self, item: Any, blocking: bool = True, timeout: float | None = None) -> None:
        """Send ``item``; raises `NotAvailable` when full and not blocking, `ChannelClosed`."""
        raise NotImplementedError

    def get(self, blocking: bool = True, timeout: float | None = None) -> Any:
        """Receive the next item; raises `NotAvailable` when empty and not blocking."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the channel for both ends (idempotent)."""
        raise NotImplementedError

    def __reduce__(self) -> Any:
        raise TypeError("channel endpoints cannot be copied or pickled: a channel has two ends")


class _Pair:
    """State shared by the two ends of a thread channel."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity should be at least 1, got {capacity}")
        self.capacity = capacity
        self.lock = threading.Lock()
        self.inboxes: tuple[deque[Any], deque[Any]] = (deque(), deque())
        self.bells = (Doorbell(), Doorbell())
        self.closed = False


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class _ThreadEndpoint(Endpoint):
    def __init__(self, pair: _Pair, side: int) -> None:
        self._pair = pair
        self._side = side
        self.bell = pair.bells[side]

    def put(self, item: Any, blocking: bool = True, timeout: float | None = None) -> None:
        pair, peer = self._pair, 1 - self._side
        deadline = _deadline(timeout)
        while True:
            with pair.lock:
                if pair.closed:
                    raise ChannelClosed("put on a closed channel")
                outbox = pair.inboxes[peer]
                if len(outbox) < pair.capacity:
                    outbox.append(item)
                    break
                since = self.bell.generation
            self._wait_or_raise(blocking, since, deadline)
        pair.bells[peer].ring()

    def get(self, blocking: bool = True, timeout: float | None = None) -> Any:
        pair = self._pair
        deadline = _deadline(timeout)
        while True:
            with pair.lock:
                inbox = pair.inboxes[self._side]
                if inbox:
                    item = inbox.popleft()
                    break
                if pair.closed:
                    raise ChannelClosed("the other end closed the channel")
                since = self.bell.generation
            self._wait_or_raise(blocking, since, deadline)
        pair.bells[1 - self._side].ring()  # room freed for the peer's put
        return item

    def _wait_or_raise(self, blocking: bool, since: int, deadline: float | None) -> None:
        if not blocking:
            raise NotAvailable(self.bell, since)
        if not self.bell.wait(since, _remaining(deadline)):
            raise NotAvailable(self.bell, since)

    def close(self) -> None:
        with self._pair.lock:
            if self._pair.closed:
                return
            self._pair.closed = True
        for bell in self._pair.bells:
            bell.ring()


def thread_channel(capacity: int) -> tuple[Endpoint, Endpoint]:
    """A channel between two threads of this process; returns its two endpoints."""
    pair = _Pair(capacity)
    return _ThreadEndpoint(pair, 0), _ThreadEndpoint(pair, 1)


class _ConnectionEndpoint(Endpoint):
    """The child's end of a process channel: a thin wrapper over a `Connection`."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._closed = False
        self.bell = Doorbell()  # never rung: the child only uses blocking calls

    def put(self, item: Any, blocking: bool = True, timeout: float | None = None) -> None:
        if self._closed:
            raise ChannelClosed("put on a closed channel")
        try:
            self._conn.send(item)
        except (BrokenPipeError, EOFError, OSError) as exc:
            raise ChannelClosed("the other process closed the channel") from exc

    def get(self, blocking: bool = True, timeout: float | None = None) -> Any:
        if self._closed:
            raise ChannelClosed("get on a closed channel")
        try:
            ready = self._conn.poll(None if blocking and timeout is None else (timeout or 0.0))
            if not ready:
                raise NotAvailable(None)
            item = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise ChannelClosed("the other process closed the channel") from exc
        if _is_close(item):
            self._closed = True
            raise ChannelClosed("the other process closed the channel")
        return item

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(BrokenPipeError, EOFError, OSError):
                self._conn.send(_CloseSignal())
        self._conn.close()


def connection_endpoint(conn: Connection) -> Endpoint:
    """Wrap the raw connection a child process received from `process_channel`."""
    return _ConnectionEndpoint(conn)


class ProcessEndpoint(Endpoint):
    """The parent's end of a process channel.

    A pump thread moves messages from the connection into a bounded thread channel, so
    ``get`` never touches the pipe and waiting uses the same `Doorbell` as thread channels.
    """

    def __init__(self, conn: Connection, capacity: int) -> None:
        self._conn = conn
        self._send_lock = threading.Lock()
        self._local, pump_side = thread_channel(capacity)
        self.bell = self._local.bell
        self._pump = threading.Thread(
            target=_pump, args=(conn, pump_side), name="conveyor-channel-pump", daemon=True
        )
        self._pump.start()

    @property
    def connection(self) -> Connection:
        """The parent's raw connection; a *forked* child must close its inherited copy."""
        return self._conn

    def put(self, item: Any, blocking: bool = True, timeout: float | None = None) -> None:
        with self._send_lock:
            if self._conn.closed:
                raise ChannelClosed("put on a closed channel")
            try:
                self._conn.send(item)
            except (BrokenPipeError, EOFError, OSError) as exc:
                raise ChannelClosed("the other process closed the channel") from exc

    def get(self, blocking: bool = True, timeout: float | None = None) -> Any:
        return self._local.get(blocking, timeout)

    def close(self, join_timeout_s: float = 5.0) -> None:
        """Close, tell the child, and wait for the pump (the child must exit to end it)."""
        self._local.close()
        with self._send_lock:
            if not self._conn.closed:
                with contextlib.suppress(BrokenPipeError, EOFError, OSError):
                    self._conn.send(_CloseSignal())
        self._pump.join(join_timeout_s)
        if not self._pump.is_alive():
            with self._send_lock:
                self._conn.close()


def _pump(conn: Connection, sink: Endpoint) -> None:
    """Forward messages from ``conn`` into ``sink`` until EOF or until ``sink`` closes."""
    try:
        while True:
            try:
                item = conn.recv()
            except (EOFError, OSError):
                return
            if _is_close(item):
                return
            try:
                sink.put(item)
            except ChannelClosed:
                return
    finally:
        sink.close()


def process_channel(context: Any, capacity: int) -> tuple[ProcessEndpoint, Connection]:
    """A channel between this process and one child.

    Returns the parent's endpoint and the raw connection to pass to the child process
    (wrap it there with `connection_endpoint`; close it here once the child has started).
    ``context`` is a `multiprocessing` context.
    """
    parent_conn, child_conn = context.Pipe(duplex=True)
    return ProcessEndpoint(parent_conn, capacity), child_conn
