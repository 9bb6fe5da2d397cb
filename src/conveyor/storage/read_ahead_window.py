"""The read-ahead window autotune asks for: a per-process floor on `RangedReader`'s window.

A reader sizes its own window (``RemoteOptions.read_ahead``, doubling up to
``read_ahead_max`` when it reaches a block still arriving). Autotune sees more: the
training loop waiting while the workers wait on remote reads. It then sets this floor in
every worker (`conveyor.engine.loop.autotune`); each reader of the process keeps at least
that many blocks requested ahead, even past ``read_ahead_max``, from its next request on.
``read_ahead=0`` (one block at a time) is never overridden. 0: no floor, the reader's own.
"""

from __future__ import annotations

__all__ = ["read_ahead_floor", "set_read_ahead_floor"]

_floor = 0  # one process's (thread workers share the main process's)


def read_ahead_floor() -> int:
    """Blocks every reader of this process keeps requested ahead at least (0: no floor)."""
    return _floor


def set_read_ahead_floor(blocks: int) -> None:
    """Autotune's window for this process's readers, from their next request on."""
    global _floor
    if blocks < 0:
        raise ValueError(f"read-ahead floor should be >= 0 blocks, got {blocks}")
    _floor = blocks
