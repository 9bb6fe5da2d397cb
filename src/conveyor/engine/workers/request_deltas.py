"""Remote requests made since the last look, taken by one reporter at a time.

`conveyor.storage` counts a process's requests (totals only grow). A worker process sends
what it made since its last batch with the next one, and the main process adds its own
(listing, thread workers, ``num_workers=0``) after each batch; thread workers share their
process's totals, so every difference is taken under a lock and goes to exactly one
report, and ``loader.stats()`` counts each request once.
"""

from __future__ import annotations

import os
import sys
import threading

from conveyor.stats.requests import RequestCounts

__all__ = ["take_request_counts"]

_lock = threading.Lock()
_reported = RequestCounts()


def _totals() -> RequestCounts:
    """The process's totals; none while `conveyor.storage` was never imported (then no
    remote request was made, and ``import conveyor`` stays without it)."""
    tally = sys.modules.get("conveyor.storage.request_tally")
    return RequestCounts() if tally is None else tally.request_counts()


def take_request_counts() -> RequestCounts:
    """This process's requests since the previous call (from any thread)."""
    global _reported
    with _lock:
        now = _totals()
        taken, _reported = now - _reported, now
    return taken


def _after_fork_in_child() -> None:
    global _lock, _reported
    _lock = threading.Lock()  # another thread may have held it at the fork
    _reported = _totals()  # the parent's requests are the parent's to report


os.register_at_fork(after_in_child=_after_fork_in_child)
