"""Remote requests made since the last look, taken by one reporter at a time.

`conveyor.storage` counts a process's requests (totals only grow). A worker process sends
what it made since its last batch with the next one, and the main process adds its own
(listing, thread workers, ``num_workers=0``) after each batch; thread workers share their
process's totals, so every difference is taken under a lock and goes to exactly one
report, and ``loader.stats()`` counts each request once.
"""

from __future__ import annotations

import os
import threading

from conveyor.stats.requests import RequestCounts
from conveyor.storage import request_counts

__all__ = ["take_request_counts"]

_lock = threading.Lock()
_reported = request_counts()


def take_request_counts() -> RequestCounts:
    """This process's requests since the previous call (from any thread)."""
    global _reported
    with _lock:
        now = request_counts()
        taken, _reported = now - _reported, now
    return taken


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)
