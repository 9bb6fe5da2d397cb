"""One period of the mixture schedule: which source each of ``period`` positions takes.

The period is built so that every prefix is within quota: after ``t`` positions source
``i`` has ``floor(t * q_i / Q)`` or ``ceil(t * q_i / Q)`` items (``q_i`` its shares, ``Q``
the period), hence deviates from its ideal ``t * q_i / Q`` by less than one. Its ``k``-th
item (from 0) may go no earlier than position ``floor(k * Q / q_i)`` (else it would exceed
its upper quota) and no later than ``ceil((k + 1) * Q / q_i) - 1`` (else it would fall
below its lower quota). Scheduling these unit jobs earliest-deadline-first among the
released ones meets every deadline whenever any schedule does (EDF is optimal for unit
jobs with integer release times), and one does: the quota method of Balinski and Young
(1975) proves that a house-monotone apportionment within quota exists for every house
size. Ties go to the lower source index, so the period is a pure function of the shares.
At the end of the period every source has exactly its shares, so periods repeat.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

__all__ = ["Period", "period_for"]


@dataclass(frozen=True)
class Period:
    """A built period and the lookups that make random access O(1)."""

    shares: tuple[int, ...]
    sources: NDArray[np.int32]  # source at each offset of the period
    ranks: NDArray[np.int64]  # how many earlier offsets hold the same source
    offsets_by_source: tuple[NDArray[np.int64], ...]  # the offsets each source takes

    @property
    def length(self) -> int:
        return int(self.sources.size)

    def counts_before(self, offset: int) -> NDArray[np.int64]:
        """Items per source in offsets ``[0, offset)``."""
        return np.bincount(self.sources[:offset], minlength=len(self.shares)).astype(np.int64)


@lru_cache(maxsize=32)
def period_for(shares: tuple[int, ...]) -> Period:
    """The period of ``shares`` (cached: weight vectors recur in a run's history)."""
    sources = _earliest_deadline_first(shares)
    order = np.argsort(sources, kind="stable")
    counts = np.bincount(sources, minlength=len(shares))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    ranks = np.empty(sources.size, dtype=np.int64)
    ranks[order] = np.arange(sources.size) - np.repeat(starts, counts)
    by_source = tuple(
        order[s : s + c].astype(np.int64) for s, c in zip(starts, counts, strict=True)
    )
    return Period(shares, sources, ranks, by_source)


def _earliest_deadline_first(shares: tuple[int, ...]) -> NDArray[np.int32]:
    period = sum(shares)
    out = np.empty(period, dtype=np.int32)
    # Each source has one job in play, its next item: waiting for release, or ready.
    waiting = [(0, source) for source, share in enumerate(shares) if share > 0]  # (release,)
    ready: list[tuple[int, int]] = []  # (deadline, source)
    taken = [0] * len(shares)
    for offset in range(period):
        while waiting and waiting[0][0] <= offset:
            _, source = heapq.heappop(waiting)
            k = taken[source]
            deadline = -(-(k + 1) * period // shares[source]) - 1
            heapq.heappush(ready, (deadline, source))
        deadline, source = heapq.heappop(ready)  # never empty: see the module docstring
        if deadline < offset:
            raise AssertionError(f"mixture period missed a deadline for shares {shares}")
        out[offset] = source
        taken[source] += 1
        if taken[source] < shares[source]:
            release = taken[source] * period // shares[source]
            heapq.heappush(waiting, (release, source))
    return out
