"""How many blocks a remote reader keeps in flight: the read-ahead window, per host.

The one place that sizes `RangedReader`'s window (`conveyor.storage.ranged`). A reader
that runs out of bytes waits a whole block's turnaround (the request's round trip, then
the block's transfer at what one connection carries), so the window must hold the bytes
the reader consumes in that time: **bytes in flight = the reader's rate x a block's
turnaround** (Little's law; the bandwidth-delay product of the path, one connection's
window being what limits a single request on a long link). Both are observed:

- ``turnaround_s``: a block's time from its request to its last byte (a moving average
  over the blocks of the host's readers);
- ``demand_bps``: the bytes a reader consumed per second of its own time spent not
  waiting for blocks (what it would take if the link never held it back).

`HostWindow.blocks` turns them into blocks, at least ``RemoteOptions.read_ahead`` and at
most ``read_ahead_max`` (the memory bound: ``read_ahead_max * block`` per open object).
Before anything is measured, a reader that has to wait for a block already asked for
doubles its window (`widen`), as before; the width is remembered per host, so the next
object of the host, and its next shard, start at it instead of ramping up again.

The first window of an object whose size is not yet known is asked for at once
(`early_blocks`), not block after block once the first answer said the size, which on a
100 ms link cost the first shard of every worker two round trips at its start: on a host
whose objects have all been larger than the window; after a small object, only as many
blocks as the smallest object seen on the host holds. On a host not seen yet only the first
block goes out before the size (nothing is asked past a small object's end or of a missing
object); the connections of the rest are opened meanwhile (`conveyor.storage.warm_pool`).

Autotune may set a floor on every window of the process (`set_read_ahead_floor`): when the
training loop waits while the workers wait on remote reads, it sends every worker a
read-ahead; each reader then keeps at least that many blocks requested, even past
``read_ahead_max``, within a byte share per reader of its memory budget.
``read_ahead=0`` (one block at a time) is never overridden. A floor of 0: no floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from conveyor.storage.options import RemoteOptions

__all__ = [
    "LONG_FIRST_ANSWER_S",
    "HostWindow",
    "host_window",
    "read_ahead_floor",
    "set_read_ahead_floor",
]

_SMOOTHING = 0.3  # weight of a new observation in the moving averages

LONG_FIRST_ANSWER_S = 0.15
"""A first answer this late means a long link (a new connection's handshake and a request
take two round trips: 2 x 25 ms plus the store's time stays well under it; 2 x 100 ms
does not)."""


@dataclass
class HostWindow:
    """What the readers of one host learned about the window they need."""

    depth: int = 0
    """The widest window (blocks) a reader of this host needed; later readers start there."""
    turnaround_s: float | None = None
    demand_bps: float | None = None
    smallest_object: int | None = None
    """The smallest object (bytes) seen on this host: how far a first window may reach."""

    def blocks(self, options: RemoteOptions, block_bytes: int) -> int:
        """The window (blocks) this host's readers should keep in flight now."""
        widest = max(1, options.widest_read_ahead)
        wanted = max(options.read_ahead, self.depth)
        if self.turnaround_s is not None and self.demand_bps is not None:
            in_flight = self.demand_bps * self.turnaround_s  # Little's law
            wanted = max(wanted, math.ceil(in_flight / block_bytes) + 1)
        return max(1, min(wanted, widest))

    def widen(self, depth: int, options: RemoteOptions) -> int:
        """A reader waited for a block it had asked for: twice ``depth`` (up to the bound),
        remembered for the host."""
        wider = min(2 * depth, max(1, options.widest_read_ahead))
        self.depth = max(self.depth, wider)
        return wider

    def first_answer(self, delay_s: float, depth: int, options: RemoteOptions) -> int:
        """An object's first answer came ``delay_s`` after its request (a connection's
        handshake and a round trip, on a new host). Before the host's turnaround is
        measured, one later than `LONG_FIRST_ANSWER_S` says the link is long: the window the
        size lets out is twice ``depth`` (remembered for the host), as if the reader had
        waited for a block, instead of waiting for the first window's blocks to show it."""
        if self.turnaround_s is not None or delay_s < LONG_FIRST_ANSWER_S:
            return depth
        return self.widen(depth, options)

    def early_blocks(self, depth: int, block_bytes: int) -> int:
        """How many blocks of a first window go out before the object's size is known."""
        if self.smallest_object is None:
            return 1
        return max(1, min(depth, math.ceil(self.smallest_object / block_bytes)))

    def saw_object(self, size: int) -> None:
        if self.smallest_object is None or size < self.smallest_object:
            self.smallest_object = size

    def saw_block(self, turnaround_s: float) -> None:
        self.turnaround_s = _average(self.turnaround_s, turnaround_s)

    def saw_demand(self, bytes_per_s: float) -> None:
        self.demand_bps = _average(self.demand_bps, bytes_per_s)


def _average(old: float | None, new: float) -> float:
    return new if old is None else old + _SMOOTHING * (new - old)


_windows: dict[str, HostWindow] = {}


def host_window(host: str) -> HostWindow:
    """The window state of ``host`` in this process (readers of every thread share it)."""
    found = _windows.get(host)
    if found is None:
        found = _windows[host] = HostWindow()
    return found


_floor = 0  # autotune's, for this process (thread workers share the main process's)
_floor_max_bytes: int | None = None  # what the floor may hold per reader


def read_ahead_floor(block_bytes: int) -> int:
    """Blocks of ``block_bytes`` every reader of this process keeps requested ahead at
    least (0: no floor)."""
    if _floor_max_bytes is None or _floor == 0:
        return _floor
    return max(1, min(_floor, _floor_max_bytes // max(1, block_bytes)))


def set_read_ahead_floor(blocks: int, max_bytes: int | None = None) -> tuple[int, int | None]:
    """Autotune's window for this process's readers, from their next request on: at least
    ``blocks`` blocks, within ``max_bytes`` per reader (None: no byte limit). Returns the
    floor before, to restore (the doctor's counterfactual sets one for a run)."""
    global _floor, _floor_max_bytes
    if blocks < 0 or (max_bytes is not None and max_bytes < 0):
        raise ValueError(f"read-ahead floor should be >= 0, got {blocks} blocks, {max_bytes}")
    before = _floor, _floor_max_bytes
    _floor, _floor_max_bytes = blocks, max_bytes
    return before
