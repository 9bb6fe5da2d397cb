"""An in-memory object served by range on fsspec's event loop, its requests failing as
scripted: every decision of the remote reader checked without a network (the integration
tests check the same against real servers)."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import fsspec.asyn

from conveyor.storage import RemoteOptions
from conveyor.storage.answers import Answer
from conveyor.storage.http_source import HttpStatusError, classify_http
from conveyor.storage.retry import Failure

FAST = RemoteOptions(retries=3, backoff_s=0.0, read_timeout_s=1.0, hedge_budget=0.0)
_hosts = itertools.count()


@dataclass
class Cut:
    """The answer breaks after ``after`` body bytes."""

    after: int


@dataclass
class Late:
    """The answer's first byte comes ``seconds`` late."""

    seconds: float


class Held:
    """The answer waits until the test calls `release` (from its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._released = False
        self._waiting: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def release(self) -> None:
        with self._lock:
            self._released = True
            if self._waiting is not None:
                loop, event = self._waiting
                loop.call_soon_threadsafe(event.set)

    async def wait(self) -> None:
        event = asyncio.Event()
        with self._lock:
            if self._released:
                return
            self._waiting = (asyncio.get_running_loop(), event)
        await asyncio.wait_for(event.wait(), 30)


@dataclass
class Hang:
    """No answer; the client's read timeout fires after ``seconds``."""

    seconds: float


def throttle(status: int = 429, retry_after: float | None = None) -> HttpStatusError:
    return HttpStatusError(status, "Too Many Requests", ScriptedSource.url, retry_after)


class ScriptedSource:
    """``data`` served by range; each request takes the next fault of ``faults`` (an
    exception to raise, a `Cut`, `Late`, `Hang`, or None for a good answer)."""

    url = "http://test/object"

    def __init__(self, data: bytes, faults: list[Any] | None = None, ranges: bool = True):
        self.data = data
        self.faults = list(faults or [])
        self.ranges = ranges
        self.host = f"test-host-{next(_hosts)}"  # its own limit, latencies, learned window
        self.fs = SimpleNamespace(loop=fsspec.asyn.get_loop())
        self.requests: list[tuple[int, int]] = []
        self.open_answers = 0
        self.in_flight = 0
        self.peak = 0
        self.warmed: list[tuple[int, int]] = []  # (connections, requests sent before)
        self._changed = threading.Condition()  # notified at each request, answer, warm-up

    def wait_until(self, done: Callable[[], Any], timeout: float = 5.0) -> bool:
        """Wait (from the test's thread) until ``done()`` holds; False after ``timeout``."""
        with self._changed:
            return bool(self._changed.wait_for(done, timeout))

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    async def arequest(self, start: int, end: int, etag: str | None) -> Answer:
        self.requests.append((start, end))
        fault = self.faults.pop(0) if self.faults else None
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self._notify()
        try:
            if isinstance(fault, Held):
                await fault.wait()
            if isinstance(fault, Late):
                await asyncio.sleep(fault.seconds)
            if isinstance(fault, Hang):
                await asyncio.sleep(fault.seconds)
                raise TimeoutError
            if isinstance(fault, BaseException):
                raise fault
        finally:
            self.in_flight -= 1
            self._notify()
        size = len(self.data)
        if not self.ranges:
            start, end = 0, size
        if start >= size:
            return Answer(None, start, start, size)
        end = min(end, size)
        cut = start + fault.after if isinstance(fault, Cut) else None
        self.open_answers += 1
        return Answer({"at": start, "end": end, "cut": cut}, start, end, size, '"etag"')

    async def awarm(self, connections: int) -> None:
        self.warmed.append((connections, len(self.requests)))
        self._notify()

    async def aread(self, answer: Answer, at_most: int) -> tuple[bytes, BaseException | None]:
        body = answer.handle
        if body is None:
            return b"", None
        stop = min(body["end"], body["at"] + at_most)
        if body["cut"] is not None and stop >= body["cut"]:
            data = self.data[body["at"] : body["cut"]]
            body["at"] = body["cut"]
            return data, ConnectionResetError("reset by peer")
        data = self.data[body["at"] : stop]
        body["at"] = stop
        return data, None

    async def arelease(self, handle: Any) -> None:
        if handle is not None:
            self.open_answers -= 1
            self._notify()

    def classify(self, error: BaseException) -> Failure:
        return classify_http(error, FAST)
