"""How fast requests may start to one host once it throttled: the rate it was found to admit.

A store that limits *requests per second* (S3's per-prefix rates, a rate-limiting proxy)
is not answered by fewer requests in flight alone: one connection may already ask more
often than the store allows. So a throttle also sets a pace, learnt from what the store
did, not guessed by halving:

- at the first throttle (once per round: throttles of requests started before the last
  cut, or just after it, say nothing new) the pace drops at once to ``_CUT`` of the rate
  requests were starting at, so that the storm stops; once that round has settled
  (``_SETTLE_S`` later, when the throttled answers of the requests of that second are
  in), the requests the store *admitted* among those started in the second before the
  cut give the rate it allows this process, and the pace goes to ``_LEARNT`` of that (a
  store's burst allowance counts in that second: the margin is for it);
- at a later throttle the pace was too fast by a little: it drops to ``_BELOW`` of itself;
- while the pace holds requests back it grows by ``_GROWTH`` requests a second each
  second, and faster the longer no throttle came (doubling each second after
  ``_CALM_S``, as TCP CUBIC grows far from its last loss): processes that share a store
  each learn their own share, and one that learnt too little, or whose peers finished,
  soon takes more (with process workers the slowest one sets the pace of the batches
  delivered in order); after ``PROBE_ANSWERS`` answers without a throttle that did not
  wait it tries a tenth more (a probe), so a store whose limit rose is found.

Halving and growing back (a saw-tooth between half and all of the allowed rate) kept
0.72-0.9x of the rate a store allowed in the S7 throttle benchmark; pacing just under the
admitted rate keeps 0.9-1.0x of it. Until the first throttle there is no pace.
Starts are spaced ``1 / rate`` apart at the rate of the moment each slot comes (a request
that waited at the old rate does not keep a slot of it); everything runs on the fetching
event loop's thread (no lock).
"""

from __future__ import annotations

import asyncio
import collections
import time

__all__ = ["PROBE_ANSWERS", "Pace"]

PROBE_ANSWERS = 64
"""Answers held at the learnt pace before one step more is tried."""
_WINDOW_S = 1.0  # the second of starts before a throttle that says what the store admits
_SLOWEST = 1.0  # requests a second: the pace never goes below this
_CUT = 0.5  # at a throttle, until the round settles: this share of the starting rate
_LEARNT = 0.8  # the pace starts at this share of the rate the store admitted (a bucket's
#  burst allowance counts in that second: 0.9 of it was still throttled in the benchmark)
_BELOW = 0.9  # at a later throttle: this share of the pace
_SETTLE_S = 1.0  # throttles of requests started this soon after a cut judge the old pace
_PROBE = 1.1
_GROWTH = 0.25  # requests a second more, each second the pace holds requests back ...
_CALM_S = 2.0  # ... doubled each second after this long without a throttle ...
_GROWTH_DOUBLINGS = 4  # ... up to 16 times


class Pace:
    """The start rate of one host's requests (None: unlimited, before any throttle)."""

    def __init__(self) -> None:
        self.rate: float | None = None
        self._next = 0.0  # the earliest start of the next request (monotonic)
        self._starts: collections.deque[float] = collections.deque()
        self._throttled: collections.deque[float] = collections.deque()  # their starts
        self._cut_at = float("-inf")
        self._learn_at: float | None = None  # when the last cut's round has settled
        self._at_pace = 0
        self._binding = False  # the last request waited for its turn

    async def turn(self) -> float:
        """Wait for this request's turn to start; returns its start time (monotonic)."""
        waited = False
        while True:  # the slot is taken when it comes, at the rate of that moment
            now = time.monotonic()
            self._learn(now)
            if self.rate is None or now >= self._next:
                break
            waited = True
            await asyncio.sleep(self._next - now)
        start = now
        if self.rate is not None:
            self._next = start + 1.0 / self.rate
        self._binding = waited
        self._starts.append(start)
        self._forget(start - _WINDOW_S - _SETTLE_S)
        return start

    def _last_start(self) -> float:
        return self._starts[-1] if self._starts else float("-inf")

    def _forget(self, before: float) -> None:
        for kept in (self._starts, self._throttled):
            while kept and kept[0] < before:
                kept.popleft()

    def _count(self, kept: collections.deque[float], since: float, until: float) -> int:
        return sum(1 for t in kept if since <= t <= until)

    def throttled(self, sent_at: float) -> None:
        """A request started at ``sent_at`` was throttled: slow down at once (once per
        round), and learn the admitted rate when the round has settled."""
        self._throttled.append(sent_at)
        if sent_at <= self._cut_at + _SETTLE_S:
            return
        self._cut()

    def heard(self, at: float) -> None:
        """Another process of the job was throttled by this host at ``at``: before any
        throttle of our own, cut as at a first throttle (none of ours was refused, so the
        rate learnt is just under the one we were starting at); once paced, or with no
        request of ours in the last second to learn from, nothing."""
        now = time.monotonic()
        started = self._count(self._starts, now - _WINDOW_S, now)
        if self.rate is None and started and at > self._cut_at + _SETTLE_S:
            self._cut()

    def _cut(self) -> None:
        now = time.monotonic()
        self._cut_at = now
        starting = self._count(self._starts, now - _WINDOW_S, now) / _WINDOW_S
        if self.rate is None:  # the first throttle: learn the allowed rate once settled
            self.rate = max(_SLOWEST, _CUT * starting)
            self._learn_at = now + _SETTLE_S
        else:  # paced, and still a little too fast: the store allows less than that
            self.rate = max(_SLOWEST, _BELOW * min(starting, self.rate))
            self._learn_at = None
        self._next = self._last_start() + 1.0 / self.rate  # the new spacing, at once
        self._at_pace = 0

    def _learn(self, now: float) -> None:
        """The round after a cut has settled: pace just under what the store admitted of
        the requests started in the second before the cut."""
        if self._learn_at is None or now < self._learn_at:
            return
        self._learn_at = None
        since, until = self._cut_at - _WINDOW_S, self._cut_at
        admitted = self._count(self._starts, since, until) - self._count(
            self._throttled, since, until
        )
        self.rate = max(self.rate or _SLOWEST, _LEARNT * admitted / _WINDOW_S)
        self._next = self._last_start() + 1.0 / self.rate  # the new spacing, at once

    def answered(self) -> None:
        """A request went through: after ``PROBE_ANSWERS`` of them at the pace, try a
        little faster."""
        if self.rate is None:
            return
        self._learn(time.monotonic())
        if self._learn_at is not None:
            return
        if self._binding:  # the pace holds requests back: a little faster, then faster
            calm = time.monotonic() - self._cut_at - _CALM_S
            growth = _GROWTH * 2.0 ** min(_GROWTH_DOUBLINGS, max(0.0, calm))
            self.rate += growth / self.rate
            return
        self._at_pace += 1
        if self._at_pace >= PROBE_ANSWERS:
            self._at_pace = 0
            self.rate *= _PROBE
