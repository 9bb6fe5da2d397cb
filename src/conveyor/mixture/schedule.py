"""The mixture schedule: the source of every global position, with weight changes.

A schedule is a list of segments ``(start, rates)``; segment ``j`` covers positions
``[start_j, start_{j+1})`` and repeats the period of its rates from its own start. The
source at position ``p`` is ``period.sources[(p - start_j) % Q]``, and which item of that
source it is (its running count) is ``base_j[s] + ((p - start_j) // Q) * q_s +
period.ranks[(p - start_j) % Q]``: O(1) per position after an O(log #segments) search,
vectorised over blocks of positions, with no replay from position 0. ``base_j`` (counts
at each segment's start) is derived from the segments, never stored.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from conveyor.mixture.period import Period, period_for
from conveyor.mixture.rates import Rates

__all__ = ["Schedule", "Segment"]


@dataclass(frozen=True)
class Segment:
    start: int
    rates: Rates
    period: Period
    base: NDArray[np.int64]  # items per source before ``start``


class Schedule:
    """Sources and per-source item numbers of global positions, under weight changes."""

    def __init__(self, rates: Rates) -> None:
        self._segments: list[Segment] = []
        self._starts: list[int] = []
        self._append(0, rates, np.zeros(len(rates.shares), dtype=np.int64))

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    @property
    def num_sources(self) -> int:
        return len(self._segments[0].rates.shares)

    @property
    def rates(self) -> Rates:
        """The rates in force from the last change on."""
        return self._segments[-1].rates

    def change(self, position: int, rates: Rates) -> None:
        """Follow ``rates`` from ``position`` on (at or after the last change)."""
        last = self._segments[-1]
        if position < last.start:
            raise ValueError(
                f"a weight change at position {position} comes before the last one (at "
                f"{last.start}): changes are recorded in order"
            )
        if rates.shares == last.rates.shares:
            return
        if position == last.start:  # replaces a change that took no position yet
            self._segments.pop()
            self._starts.pop()
            if self._segments and self._segments[-1].rates.shares == rates.shares:
                return
            base = last.base
        else:
            base = self.counts_before(position)
        self._append(position, rates, base)

    def _append(self, start: int, rates: Rates, base: NDArray[np.int64]) -> None:
        self._segments.append(Segment(start, rates, period_for(rates.shares), base))
        self._starts.append(start)

    def _segment_at(self, position: int) -> Segment:
        return self._segments[bisect.bisect_right(self._starts, position) - 1]

    def counts_before(self, position: int) -> NDArray[np.int64]:
        """Items per source in positions ``[0, position)``."""
        segment = self._segment_at(position)
        cycles, offset = divmod(position - segment.start, segment.period.length)
        shares = np.asarray(segment.rates.shares, dtype=np.int64)
        return segment.base + cycles * shares + segment.period.counts_before(offset)

    def source_at(self, position: int) -> int:
        segment = self._segment_at(position)
        offset = (position - segment.start) % segment.period.length
        return int(segment.period.sources[offset])

    def locate(self, start: int, stop: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """For positions ``[start, stop)``: each one's source and item number in it."""
        sources = np.empty(stop - start, dtype=np.int64)
        items = np.empty(stop - start, dtype=np.int64)
        index = bisect.bisect_right(self._starts, start) - 1
        begin = start
        while begin < stop:
            segment = self._segments[index]
            end = stop if index + 1 == len(self._segments) else min(stop, self._starts[index + 1])
            relative = np.arange(begin - segment.start, end - segment.start, dtype=np.int64)
            cycles, offsets = np.divmod(relative, segment.period.length)
            chosen = segment.period.sources[offsets].astype(np.int64)
            shares = np.asarray(segment.rates.shares, dtype=np.int64)
            taken = segment.base[chosen] + cycles * shares[chosen] + segment.period.ranks[offsets]
            sources[begin - start : end - start] = chosen
            items[begin - start : end - start] = taken
            begin, index = end, index + 1
        return sources, items

    def position_of(self, source: int, item: int) -> int | None:
        """The global position of ``source``'s item number ``item`` (None: never comes)."""
        for index, segment in enumerate(self._segments):
            last = index + 1 == len(self._segments)
            if not last and self._segments[index + 1].base[source] <= item:
                continue
            share = segment.rates.shares[source]
            if share == 0:
                return None  # only the last segment can lack the item
            cycles, rank = divmod(item - int(segment.base[source]), share)
            offset = int(segment.period.offsets_by_source[source][rank])
            return segment.start + cycles * segment.period.length + offset
        return None
