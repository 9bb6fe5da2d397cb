"""One limit per host and process: how many requests may be in flight to it (AIMD).

Many readers in one process (thread workers, each with a read-ahead window and the next
shard started early) share a host. When it throttles (429, ``SlowDown``), asking again at
the same concurrency only earns more throttles: the limit halves (once per round of
requests: throttles of requests sent before the last cut do not cut again), then grows
back by one request for each limit's worth of answers that came through (additive
increase, multiplicative decrease, as TCP does with its window), but only while the limit
is what holds the readers back, and only up to one below the level that was throttled.
There it stays until ``PROBE_ANSWERS`` answers came through, then tries one more: a store
with a fixed capacity is then throttled about once per ``PROBE_ANSWERS`` requests, not at
every step of a saw-tooth. Requests over the limit wait, in order, for a slot.

A store that limits requests per second is also paced (`conveyor.storage.host_pace`):
once it throttled, requests to it start no faster than just under the rate it was found
to admit.

Everything here runs on the event loop that fetches (fsspec's ``fs.loop``): the state is
per loop and host, and only touched from that loop's thread, so it needs no lock.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from conveyor.storage.host_pace import Pace
from conveyor.storage.shared_throttles import last_throttle, note_throttle

__all__ = ["HOST_CONCURRENCY", "HostLimit", "host_limit", "throttled_before"]

HOST_CONCURRENCY = 64
"""Requests in flight to one host before it ever throttled (and the most the limit grows
back to): more than a process's readers ask for on a healthy store, so it only binds once
the store has said to slow down."""
PROBE_ANSWERS = 64
"""Answers at the level below the last throttle before one more request is tried (the
same as the pace's, `conveyor.storage.host_pace.PROBE_ANSWERS`)."""

HEARD_WITHIN_S = 30.0
"""A throttle another process of the job heard this recently slows this one down too."""

_limits: dict[tuple[int, str], HostLimit] = {}


def host_limit(
    host: str, loop: asyncio.AbstractEventLoop | None = None, most: int = HOST_CONCURRENCY
) -> HostLimit:
    """The limit of ``host`` on ``loop`` (default: the running loop), made on first use;
    ``most``: the most requests in flight it ever allows (a client's connection pool: a
    request past its turn that waits for a connection is sent after a throttle it could
    have heeded)."""
    loop = loop or asyncio.get_running_loop()
    key = (id(loop), host)
    found = _limits.get(key)
    if found is None:
        found = _limits[key] = HostLimit(host, most)
    return found


def throttled_before(host: str, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``host`` has throttled a request sent from ``loop`` (or this process paces
    it after hearing of one), or one of another process of the job in the last
    ``HEARD_WITHIN_S`` (`shared_throttles`): a store that limits requests is then asked
    fewer, larger ranges (`conveyor.storage.ranged`). Read from a reader's thread: a look
    at values the loop only ever sets."""
    found = _limits.get((id(loop), host))
    if found is not None and (found.throttles > 0 or found.pace.rate is not None):
        return True
    heard = last_throttle(host)
    return heard is not None and heard > time.monotonic() - HEARD_WITHIN_S


class HostLimit:
    """The AIMD concurrency limit of one host; ``slot()`` holds one request's place."""

    def __init__(self, host: str, most: int = HOST_CONCURRENCY) -> None:
        self.host = host
        self.most = most
        self.limit = float(most)
        self.in_flight = 0
        self.throttles = 0
        self.cuts = 0
        self._cut_at = float("-inf")  # when the limit was last cut (monotonic)
        self._safe = float(most)  # one below the level that was last throttled
        self._at_safe = 0  # answers while held at that level
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self.pace = Pace()
        self._heard = float("-inf")  # the last throttle (of any process) acted on here

    @property
    def allowed(self) -> int:
        return max(1, int(self.limit))

    @asynccontextmanager
    async def slot(self, first: bool = False) -> AsyncIterator[float]:
        """Hold a place while a request is in flight, started at the host's pace; yields
        when it started (monotonic).

        ``first``: an object's first request takes its place at once, over the limit if
        need be: the blocks asked for with it hold their places until its answer says the
        object's size and version, so behind them it would wait for ever (a limit cut by a
        throttle to no more than those blocks hung a reader)."""
        await self._acquire(first)
        try:
            self._hear_others()
            yield await self.pace.turn()
        finally:
            self._release()

    def try_slot(self) -> bool:
        """Take a place only if one is free now (hedges never queue); `release` gives it back."""
        if self._waiting or self.in_flight >= self.allowed:
            return False
        self.in_flight += 1
        return True

    async def _acquire(self, first: bool = False) -> None:
        if first or (not self._waiting and self.in_flight < self.allowed):
            self.in_flight += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter  # `_wake` counted us in before resolving
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._release()  # woken and cancelled at once: give the place back
            else:
                waiter.cancel()
            raise

    def release(self) -> None:
        """Give back a place taken by `try_slot`."""
        self._release()

    def _release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self.in_flight < self.allowed:
            waiter = self._waiting.popleft()
            if waiter.done():  # cancelled while waiting
                continue
            self.in_flight += 1
            waiter.set_result(None)

    def _hear_others(self) -> None:
        """Another process of the job was throttled by this host since we last looked:
        slow down as if this one had been (its pace, once per round)."""
        heard = last_throttle(self.host)
        if heard is not None and heard > max(self._heard, time.monotonic() - HEARD_WITHIN_S):
            self._heard = heard
            self.pace.heard(heard)

    def throttled(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` (its place given back already) was throttled:
        halve the limit, once per round."""
        self.throttles += 1
        self._heard = note_throttle(self.host)
        self.pace.throttled(sent_at)
        if sent_at <= self._cut_at:
            return  # sent before the last cut: that cut already answered this congestion
        self._cut_at = time.monotonic()
        self.cuts += 1
        too_many = min(self.limit, float(self.in_flight + 1))
        self._safe = max(1.0, too_many - 1)
        self._at_safe = 0
        self.limit = max(1.0, too_many / 2)

    def answered(self) -> None:
        """A request (still holding its place) was answered, not throttled: grow by one per
        limit's worth of answers, if the limit is what holds the readers back."""
        self.pace.answered()
        if self.limit >= self.most or (self.in_flight < self.allowed and not self._waiting):
            return
        if self.limit < self._safe:
            self.limit = min(self._safe, self.limit + 1.0 / self.limit)
        else:
            self._at_safe += 1
            if self._at_safe < PROBE_ANSWERS:
                return
            self._at_safe = 0
            self._safe = self.limit = min(float(self.most), self.limit + 1)
        self._wake()

    def describe(self) -> dict[str, Any]:
        return {"host": self.host, "limit": self.allowed, "in_flight": self.in_flight,
                "rate": self.pace.rate, "throttles": self.throttles, "cuts": self.cuts}  # fmt: skip
