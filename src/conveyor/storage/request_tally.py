"""This process's remote requests, counted as they happen (`request_counts`).

Counts only grow; readers take differences. They are bumped on fsspec's event-loop thread
(block fetches) and on the caller's thread (listing); a lost increment under a race would
only make a statistic one short, and CPython's GIL makes each ``+=`` on a small int
effectively atomic for these single-writer counters anyway.
"""

from __future__ import annotations

from conveyor.stats.requests import RequestCounts

__all__ = ["count", "request_counts"]

_counts: dict[str, int] = {
    "requests": 0,
    "failed": 0,
    "throttled": 0,
    "hedged": 0,
    "hedge_wins": 0,
    "listings": 0,
    "objects": 0,
    "read_waits": 0,
    "read_wait_us": 0,
}


def count(what: str, number: int = 1) -> None:
    """Add ``number`` to counter ``what`` (a field of `RequestCounts`)."""
    _counts[what] += number


def request_counts() -> RequestCounts:
    """Everything this process asked of remote stores so far (a forked child starts with
    its parent's totals: subtract a snapshot taken at its start)."""
    return RequestCounts(**_counts)
