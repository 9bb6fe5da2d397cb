"""The read-ahead window autotune asks for: a per-process floor on `RangedReader`'s window.

A reader sizes its own window (``RemoteOptions.read_ahead``, doubling up to
``read_ahead_max`` when it reaches a block still arriving). Autotune sees more: the
training loop waiting while the workers wait on remote reads. It then sets this floor in
every worker (`conveyor.engine.loop.autotune`); each reader of the process keeps at least
that many blocks requested ahead, even past ``read_ahead_max``, from its next request on,
but no more bytes than autotune's memory share per reader allows. ``read_ahead=0`` (one
block at a time) is never overridden. A floor of 0: the reader's own window.
"""

from __future__ import annotations

__all__ = ["read_ahead_floor", "set_read_ahead_floor"]

_floor = 0  # one process's (thread workers share the main process's)
_max_bytes: int | None = None  # what the floor may hold per reader


def read_ahead_floor(block_bytes: int) -> int:
    """Blocks of ``block_bytes`` every reader of this process keeps requested ahead at
    least (0: no floor)."""
    if _max_bytes is None or _floor == 0:
        return _floor
    return max(1, min(_floor, _max_bytes // max(1, block_bytes)))


def set_read_ahead_floor(blocks: int, max_bytes: int | None = None) -> None:
    """Autotune's window for this process's readers, from their next request on: at least
    ``blocks`` blocks, within ``max_bytes`` per reader (None: no byte limit)."""
    global _floor, _max_bytes
    if blocks < 0 or (max_bytes is not None and max_bytes < 0):
        raise ValueError(f"read-ahead floor should be >= 0, got {blocks} blocks, {max_bytes}")
    _floor, _max_bytes = blocks, max_bytes
