"""Pickles whose shared-memory tables travel as file descriptors, not as bytes.

`dumps_with_fds` pickles an object graph and returns, beside the bytes, the descriptors of
the `RecordTable` objects in it; the sender passes them over a Unix socket
(``SCM_RIGHTS``) and `loads_with_fds` maps them on the other side. The pickle then holds
a few dozen bytes per table, whatever the table's size, so a worker set-up holding a
10-million-record list pickles as fast as one holding ten (docs/design/shared-records.md).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from conveyor.transport.record_table import RecordTable, TableLayout

__all__ = ["dumps_with_fds", "loads_with_fds"]

_received: ContextVar[list[int] | None] = ContextVar("conveyor_received_fds", default=None)


class _DescriptorPickler(pickle.Pickler):
    """Replaces each table that owns a descriptor by its index in ``fds``."""

    def __init__(self, file: io.BytesIO, fds: list[int]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._fds = fds
        self._index: dict[int, int] = {}  # fd -> position in fds (a table sent once)

    def reducer_override(self, obj: Any) -> Any:
        # called for objects other than exact builtins only: cheap for plain data
        if type(obj) is RecordTable:
            fd = obj.shared_fd()
            if fd is not None:
                index = self._index.setdefault(fd, len(self._fds))
                if index == len(self._fds):
                    self._fds.append(fd)
                return (_attach_received, (index, obj.layout))
        return NotImplemented


def dumps_with_fds(obj: Any) -> tuple[bytes, list[int]]:
    """``obj`` pickled, and the descriptors to send with it (still owned by the caller)."""
    buffer = io.BytesIO()
    fds: list[int] = []
    _DescriptorPickler(buffer, fds).dump(obj)
    return buffer.getvalue(), fds


def loads_with_fds(data: bytes, fds: list[int]) -> Any:
    """Unpickle what `dumps_with_fds` made, ``fds`` received in its order; closes ``fds``
    (each table keeps its own mapping)."""
    with _receiving(fds):
        return pickle.loads(data)


@contextlib.contextmanager
def _receiving(fds: list[int]) -> Iterator[None]:
    token = _received.set(fds)
    try:
        yield
    finally:
        _received.reset(token)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _attach_received(index: int, layout: TableLayout) -> RecordTable:
    fds = _received.get()
    if fds is None or index >= len(fds):
        raise pickle.UnpicklingError(
            "a shared record table arrives as a file descriptor: unpickle it with "
            "conveyor.transport.fd_pickle.loads_with_fds"
        )
    return RecordTable.attach(fds[index], layout)
