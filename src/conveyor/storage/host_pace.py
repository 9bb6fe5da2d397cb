"""How fast requests may start to one host once it throttled: AIMD on a rate.

A store that limits *requests per second* (S3's per-prefix rates, a rate-limiting proxy)
is not answered by fewer requests in flight alone: one connection may already ask more
often than the store allows. So a throttle also sets a pace: half the rate at which this
process was starting requests when it came (multiplicative decrease, once per round),
growing back by about one request a second each second (``1 / rate`` per answer) up to
just under the rate that was throttled, where it holds; only after ``PROBE_ANSWERS``
answers there is it raised by a tenth (a probe), so a store with a fixed rate throttles
about once per that many requests instead of at every tooth of a saw. Until the first
throttle there is no pace. Starts are spaced ``1 / rate`` apart, first come first served;
everything runs on the fetching event loop's thread (no lock).
"""

from __future__ import annotations

import asyncio
import collections
import time

__all__ = ["PROBE_ANSWERS", "Pace"]

PROBE_ANSWERS = 64
"""Answers held just below the level last throttled before one step more is tried."""
_WINDOW_S = 1.0  # starts counted to measure the rate a throttle came at
_SLOWEST = 2.0  # requests a second: the pace never goes below this
_BELOW = 0.8  # the pace holds at this share of the rate throttled
_SETTLE_S = 1.0  # throttles of requests started this soon after a cut judge the old pace


class Pace:
    """The start rate of one host's requests (None: unlimited, before any throttle)."""

    def __init__(self) -> None:
        self.rate: float | None = None
        self._next = 0.0  # the earliest start of the next request (monotonic)
        self._first = 0.0
        self._starts: collections.deque[float] = collections.deque()
        self._cut_at = float("-inf")
        self._safe = float("inf")
        self._at_safe = 0

    async def turn(self) -> float:
        """Wait for this request's turn to start; returns its start time (monotonic)."""
        now = time.monotonic()
        self._first = self._first or now
        start = now
        if self.rate is not None:
            start = max(now, self._next)
            self._next = start + 1.0 / self.rate
        if start > now:
            await asyncio.sleep(start - now)
        self._starts.append(start)
        while self._starts and self._starts[0] < start - _WINDOW_S:
            self._starts.popleft()
        return start

    def _starting(self, now: float) -> float:
        """Requests started a second, over the last window (or since the first start)."""
        recent = sum(1 for t in self._starts if t >= now - _WINDOW_S)
        return recent / _WINDOW_S  # a start-up burst counts as one second's requests

    def throttled(self, sent_at: float) -> None:
        """A request started at ``sent_at`` was throttled: halve the pace, once per round
        (throttles of requests started before the last cut, or so soon after it that the
        store's bucket had not refilled, say nothing new)."""
        if sent_at <= self._cut_at + _SETTLE_S:
            return
        now = time.monotonic()
        self._cut_at = now
        too_fast = self._starting(now)
        if self.rate is not None:
            too_fast = min(too_fast, self.rate)
        too_fast = max(_SLOWEST, too_fast)
        self._safe = max(_SLOWEST, _BELOW * too_fast)
        self._at_safe = 0
        self.rate = max(_SLOWEST, too_fast / 2)

    def answered(self) -> None:
        """A request went through: grow back towards (then, rarely, past) the level
        throttled."""
        rate = self.rate
        if rate is None:
            return
        if rate < self._safe:
            self.rate = min(self._safe, rate + 1.0 / rate)
            return
        self._at_safe += 1
        if self._at_safe >= PROBE_ANSWERS:
            self._at_safe = 0
            self._safe = self.rate = rate * 1.1
