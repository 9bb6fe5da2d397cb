"""The transport's own messages, carried beside the engine's on the same pipes.

Worker → main, one *frame* per message: ``header pickle + body pickle`` (two pickles
back to back in one ``send_bytes``). The header is ``(retired, note, stall)``:

- ``retired``: ids of this worker's slabs that it dropped; the main process unmaps them.
- ``note``: why a batch had to be pickled instead of using a slab (scarce shared memory),
  or None.
- ``stall``: None for a normal frame, whose body is the engine's message encoded by
  `to_shared`; an int ``seq`` for a *stall* frame (empty body): the worker is blocked
  waiting for a slab and asks the main process to answer ``(OVERFLOW, seq)``.

Main → worker, on the task pipe, mixed with the engine's messages:
``(RELEASE, slab_ids)`` (every view of these slabs is gone) and ``(OVERFLOW, seq)`` (stop
waiting for stall ``seq``: pickle this batch).
"""

from __future__ import annotations

import io
import pickle
from typing import Any

__all__ = ["OVERFLOW", "RELEASE", "header", "is_control", "read_header"]

# The engine's task-pipe messages are NamedTuples (never plain tuples), and None.
RELEASE = 8
OVERFLOW = 9


def header(retired: list[int], note: str | None, stall: int | None) -> bytes:
    return pickle.dumps((tuple(retired), note, stall), protocol=pickle.HIGHEST_PROTOCOL)


def read_header(stream: io.BytesIO) -> tuple[tuple[int, ...], str | None, int | None]:
    """Read the header; ``stream`` is left at the start of the body."""
    retired, note, stall = pickle.load(stream)
    return retired, note, stall


def is_control(message: Any, kind: int) -> bool:
    return type(message) is tuple and len(message) == 2 and message[0] == kind
