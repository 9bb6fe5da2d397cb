"""Hedged requests: a range whose first byte is late is asked for a second time.

A request that waits far longer than its peers for its first byte (a slow disk behind the
store, a busy front end, a lost packet) stalls the reader and then the training step.
When a request has not been answered after a high percentile of the first-byte times
seen lately for requests of its size class on its host, the same range is requested
again; the first answer wins and the other request is cancelled (its connection closed,
never returned to the pool half read). Both carry the object's pinned ETag (``If-Match``)
and the winner's answer is checked against the pinned version like any other, so the
bytes are the same whichever wins.

Gates, so that hedging never becomes a load of its own: nothing is hedged before 20
answers of that size class were timed; sizes are classed by powers of 16 (up to 64 KiB,
1 MiB, 16 MiB, ...), since a large range's first byte may legitimately come later; a
hedge needs a free slot under the host's limit (`conveyor.storage.host_limits`: a
throttled host is not hedged into) and a token of the hedge budget, which earns
``fraction`` of a token per request (``RemoteOptions.hedge_budget``, 5 %): at most that
share of requests is ever sent twice.

The delay is the ``1 - fraction / 2`` percentile (97.5 for the default 5 %), not the
budget's own (95): requests that are only at the ordinary end of the distribution then take
about half of the budget, and the other half is there when a really late one comes. Hedging
at the 95th percentile spent the whole 5 % on ordinary requests, so that, in the S7 tail run
(1 % of requests 20x late), most of the late ones found no token left.

It is never more than ``LATE_FACTOR`` (3) times the median of the same window: a first byte
that late is not the host's ordinary spread, whatever the percentile says. A high
percentile of 256 times is its 7th largest, so a handful of outliers decide it: the
requests that opened the connections (~12x the median in the S7 tail run) and the requests
in flight during one stall of the event loop (8 at once, ~8x) each held the percentile at
230-355 ms on a 29 ms median for the next 256 requests, and a late request in that stretch
waited that long before its hedge (docs/benchmarks.md, "Third follow-up: heavy tail"). The
median does not move for a few outliers. The ceiling only ever makes the delay shorter, when
more than ``fraction / 2`` of the window is already past 3x the median, and the budget still
bounds the hedges it adds. Where the ordinary spread is wide instead (5 % of requests at 2-3x
the median), the percentile is below the ceiling and decides alone, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from conveyor.storage.answers import Answer, RangeSource
from conveyor.storage.host_limits import HostLimit
from conveyor.storage.request_tally import count

__all__ = ["HedgeStats", "first_answer", "hedge_stats"]

MIN_SAMPLES = 20
WINDOW = 256  # first-byte times kept per size class
MIN_DELAY_S = 0.002
LATE_FACTOR = 3.0  # the delay's ceiling, in medians of the window
_BURST_TOKENS = 4.0

_stats: dict[tuple[int, str], HedgeStats] = {}


def hedge_stats(host: str) -> HedgeStats:
    """The first-byte times and hedge budget of ``host`` on the running loop."""
    key = (id(asyncio.get_running_loop()), host)
    found = _stats.get(key)
    if found is None:
        found = _stats[key] = HedgeStats()
    return found


def _size_class(span: int) -> int:
    return max(0, (max(1, span) - 1).bit_length() - 16) // 4


class HedgeStats:
    """First-byte times per size class, the hedge delay they give, and the budget."""

    def __init__(self) -> None:
        self._times: dict[int, list[float]] = {}
        self._sorted: dict[int, list[float]] = {}
        self._tokens = 1.0

    def record(self, span: int, seconds: float) -> None:
        times = self._times.setdefault(_size_class(span), [])
        times.append(seconds)
        if len(times) > WINDOW:
            del times[: len(times) - WINDOW]
        self._sorted.pop(_size_class(span), None)

    def delay(self, span: int, fraction: float = 0.05) -> float | None:
        """When to hedge a request of ``span`` bytes, with ``fraction`` of requests to spend
        (None: not enough known yet): the percentile, at most ``LATE_FACTOR`` medians."""
        size_class = _size_class(span)
        ordered = self._sorted.get(size_class)
        if ordered is None:
            times = self._times.get(size_class, [])
            if len(times) < MIN_SAMPLES:
                return None
            ordered = self._sorted[size_class] = sorted(times)
        share = min(0.99, max(0.5, 1.0 - fraction / 2))
        percentile = ordered[min(len(ordered) - 1, int(share * len(ordered)))]
        median = ordered[len(ordered) // 2]
        return max(MIN_DELAY_S, min(percentile, LATE_FACTOR * median))

    def earn(self, fraction: float) -> None:
        self._tokens = min(_BURST_TOKENS, self._tokens + fraction)

    def spend(self) -> bool:
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


async def first_answer(
    source: RangeSource,
    span: tuple[int, int],
    etag: str | None,
    limit: HostLimit,
    fraction: float,
) -> tuple[Answer, bool]:
    """The answer to a request for ``span`` (and whether a hedge gave it): hedged when its
    first byte is late, if the budget and the host's limit allow. Cancelled, it cancels
    its requests and closes any answer one of them had got."""
    stats = hedge_stats(source.host)
    size = span[1] - span[0]
    delay = None
    if fraction > 0:
        stats.earn(fraction)
        delay = stats.delay(size, fraction)
    began = time.monotonic()
    tasks: list[asyncio.Future[Answer]] = [
        asyncio.ensure_future(source.arequest(span[0], span[1], etag))
    ]
    chosen: asyncio.Future[Answer] | None = None
    try:
        if delay is not None:
            done, _ = await asyncio.wait(tasks, timeout=delay)
            if not done and stats.spend():
                if limit.try_slot():
                    tasks.append(asyncio.ensure_future(_hedge(source, span, etag, limit)))
                else:
                    stats.earn(1.0)  # not spent after all
        chosen = await _first_good(tasks)
        stats.record(size, time.monotonic() - began)
        answer = chosen.result()  # the primary's error when both failed
        won = chosen is not tasks[0]
        if won:
            count("hedge_wins")
        return answer, won
    finally:
        await _close_others(source, tasks, chosen)


async def _hedge(
    source: RangeSource, span: tuple[int, int], etag: str | None, limit: HostLimit
) -> Answer:
    count("hedged")
    count("requests")
    try:
        return await source.arequest(span[0], span[1], etag)
    finally:
        limit.release()


async def _first_good(tasks: list[asyncio.Future[Answer]]) -> asyncio.Future[Answer]:
    """The first task to answer; if it failed, the other one (the primary when both fail)."""
    pending = set(tasks)
    while True:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in sorted(done, key=tasks.index):
            if task.exception() is None:
                return task
        if not pending:
            return tasks[0]


async def _close_others(
    source: RangeSource, tasks: list[asyncio.Future[Answer]], chosen: asyncio.Future[Answer] | None
) -> None:
    """Cancel every request but ``chosen``, wait for them to end and close any answer one of
    them got: no connection is left open, or back in the pool with a body unread."""
    others = [task for task in tasks if task is not chosen]
    for task in others:
        task.cancel()
    if not others:
        return
    results = await asyncio.gather(*others, return_exceptions=True)
    for result in results:
        if isinstance(result, Answer) and result.handle is not None:
            with contextlib.suppress(Exception):
                await source.arelease(result.handle)
