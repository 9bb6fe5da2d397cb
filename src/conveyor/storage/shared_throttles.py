"""Throttles heard across a job's worker processes: the last throttle time of each host.

Each process keeps its own limit and pace per host (`host_limits`, `host_pace`), so with
process workers every worker used to learn of a throttling store only from its own 429s:
after one worker was throttled, the others went on asking at full speed, block by block,
and paid the throttles themselves (S7 at scale: 1.3-1.5x the requests a shard needs, against
1.0x with thread workers, which share one limit). This board lives in memory shared with
forked children (an anonymous shared mapping made when this module is first imported, in
the loader's process, before workers fork): a throttle is noted here, and a process that
reads a newer one than it knew cuts its own pace once and asks larger ranges, as if it had
been throttled itself. Workers started by ``spawn`` make their own board (nothing shared).

One slot per host hash (64 slots): the host's hash and the time (``time.monotonic()``,
the system-wide clock) of its last throttle. Reads and writes are not atomic across
processes; a torn or colliding slot can only make a process miss a throttle or slow down
once for nothing, never read wrong data.
"""

from __future__ import annotations

import mmap
import struct
import time
import zlib

__all__ = ["last_throttle", "note_throttle"]

_SLOTS = 64
_SLOT = struct.Struct("<Qd")  # the host's hash + 1 (0: empty), the time of its last throttle
_board = mmap.mmap(-1, _SLOTS * _SLOT.size)  # MAP_SHARED: forked children share it


def _place(host: str) -> tuple[int, int]:
    key = zlib.crc32(host.encode()) + 1
    return key, (key % _SLOTS) * _SLOT.size


def note_throttle(host: str) -> float:
    """``host`` throttled a request now; returns the time noted."""
    key, offset = _place(host)
    now = time.monotonic()
    _SLOT.pack_into(_board, offset, key, now)
    return now


def last_throttle(host: str) -> float | None:
    """When a process of this job last heard ``host`` throttle (None: never)."""
    key, offset = _place(host)
    stored, when = _SLOT.unpack_from(_board, offset)
    return when if stored == key else None
