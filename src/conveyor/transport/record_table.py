"""A list or tuple of plain records in one read-only shared-memory file: no copy-on-read.

A worker process that reads ``dataset.samples[i]`` from a Python list writes the record's
reference count, so the page holding it becomes private to the worker; after an epoch
every worker holds its own copy of the list (pytorch#13246). `RecordTable` keeps each
record as its `marshal` bytes in one buffer plus one offsets array, both in a sealed
``memfd`` (an anonymous shared-memory file with no name in ``/dev/shm``), and builds the
record on access: workers map the pages and never write them.

Plain records are ``str``, ``bytes``, ``int``, ``float``, ``bool``, ``None`` and tuples of
these (nested tuples too), of exactly those types, so `marshal` gives back an equal value
of the same type. The bytes are this process tree's own, never read from a file or a peer.

Handing a table to another process: a fork inherits the mapping; a pickler that carries
file descriptors (`conveyor.transport.fd_pickle`) sends the descriptor; any other pickle
carries the records as the plain list or tuple they came from.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import marshal
import mmap
import os
import weakref
from collections.abc import Iterator, Sequence
from itertools import chain, repeat
from typing import Any, NamedTuple, cast, overload

import numpy as np

__all__ = ["NotPlainError", "RecordTable", "TableLayout", "can_share_memory"]

_PLAIN_SCALARS = frozenset({str, bytes, int, float, bool, type(None)})
_MARSHAL_VERSION = 4
_CHUNK = 1 << 16  # records encoded per step: bounds the transient per-record bytes objects
_NESTING_LIMIT = 8
_ALLOWED = _PLAIN_SCALARS | {tuple}
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def can_share_memory() -> bool:
    """Whether this platform has anonymous shared-memory files (Linux ``memfd_create``)."""
    return hasattr(os, "memfd_create")


class NotPlainError(TypeError):
    """A record holds a value of a type the table does not keep (named in the message)."""


class TableLayout(NamedTuple):
    """Where the parts of a table's file are; travels with its descriptor."""

    token: str  # unique per built table: a rebuilt table pickles differently
    kind: type  # list or tuple: what slices and comparisons give
    length: int
    data_bytes: int
    offset_bytes: int  # 4 or 8 per offset

    @property
    def offsets_start(self) -> int:
        return -(-self.data_bytes // 8) * 8


def _check_plain(records: Sequence[Any], start: int) -> None:
    """Raise `NotPlainError` naming the first record whose types are not plain.

    Type sets are gathered in C (``set(map(type, ...))``), one nesting level at a time:
    about 0.1 s per million two-field records, against ~1 us a record for a Python loop.
    """
    level: Sequence[Any] = records
    for _ in range(_NESTING_LIMIT + 1):
        types = set(map(type, level))
        if not types <= _ALLOWED:
            _raise_not_plain(records, start)
        if tuple not in types:
            return
        tuples = level if len(types) == 1 else [v for v in level if type(v) is tuple]
        level = list(chain.from_iterable(tuples))
    _raise_not_plain(records, start)


def _is_plain(value: Any, depth: int = 0) -> bool:
    if type(value) is tuple:
        return depth < _NESTING_LIMIT and all(_is_plain(v, depth + 1) for v in value)
    return type(value) in _PLAIN_SCALARS


def _raise_not_plain(records: Sequence[Any], start: int) -> None:
    for index, record in enumerate(records):
        if not _is_plain(record):
            raise NotPlainError(
                f"item {start + index} is not a plain record ({_describe(record)}): only str, "
                "bytes, int, float, bool, None and tuples of these are kept"
            )
    raise NotPlainError(f"records from item {start} nest tuples deeper than {_NESTING_LIMIT}")


def _describe(record: Any) -> str:
    if type(record) is tuple:
        bad = [type(v).__name__ for v in record if not _is_plain(v)]
        return f"a tuple holding {', '.join(bad) or 'deeply nested tuples'}"
    return f"a {type(record).__name__}"


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class RecordTable(Sequence[Any]):
    """A sequence of plain records in shared memory; each read builds fresh objects.

    Reads behave as on the list or tuple it was built from (a slice is a list or tuple;
    out-of-range indices raise its `IndexError`). Changing a table built from a list (a
    worker that shuffles its file list in place) first copies the records into a private
    list of this process, as a forked worker's list would become private: the table, the
    main process and other workers are unaffected. A table built from a tuple refuses
    changes as a tuple does. Reading is thread-safe. The builder owns the descriptor and
    frees it with `close()`; copies in other processes are freed when dropped (or at exit).
    """

    __slots__ = (
        "__weakref__",
        "_closer",
        "_data",
        "_fd",
        "_layout",
        "_map",
        "_offsets",
        "_private",
    )

    def __init__(self, records: list[Any] | tuple[Any, ...], name: str = "conveyor-records"):
        """Encode ``records`` into a new sealed memfd.

        Raises:
            NotPlainError: a record is not plain (nothing is left behind).
            OSError: no shared memory could be had.
        """
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            layout = _encode(fd, records)
            with contextlib.suppress(OSError):  # seals are a safeguard, not a requirement
                fcntl_seal(fd)
            self._attach(fd, layout, populate=True)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        # a table dropped without close() (its owner's owner gone) still frees its descriptor
        self._closer: weakref.finalize[Any, Any] | None = weakref.finalize(self, os.close, fd)

    def _attach(self, fd: int, layout: TableLayout, populate: bool = False) -> None:
        self._layout = layout
        self._private: list[Any] | None = None
        total = layout.offsets_start + layout.offset_bytes * (layout.length + 1)
        # the builder maps every page now, so that the table counts in its PSS from the
        # start (an unmapped memfd page is in nobody's); receivers map pages as they read
        flags = mmap.MAP_SHARED | (_POPULATE if populate else 0)
        buffer = mmap.mmap(fd, total, flags=flags, prot=mmap.PROT_READ)
        self._map = buffer
        whole = memoryview(buffer)
        self._data = whole[: layout.data_bytes]
        offsets = whole[layout.offsets_start : total]
        self._offsets = offsets.cast("I") if layout.offset_bytes == 4 else offsets.cast("Q")

    # ------------------------------------------------------------ handing over
    @property
    def layout(self) -> TableLayout:
        return self._layout

    def shared_fd(self) -> int | None:
        """The memfd to send to another process (None where this copy has none, or was
        changed into a private list)."""
        return self._fd if self._private is None else None

    @classmethod
    def attach(cls, fd: int, layout: TableLayout) -> RecordTable:
        """Map a table received as a descriptor; ``fd`` stays the caller's to close."""
        table = cls.__new__(cls)
        table._fd = table._closer = None
        table._attach(fd, layout)
        return table

    def __reduce__(self) -> tuple[Any, ...]:
        # no descriptor channel (a pipe, a state dict, Ray): what the user had, plain data
        return (self._layout.kind, (list(self),))

    def __copy__(self) -> RecordTable:
        return self  # immutable until changed; a changed one is as shared as a list's copy

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self if self._private is None else copy.deepcopy(self._private, memo)

    def close(self) -> None:
        """Drop this process's descriptor and mapping (other processes keep theirs)."""
        self._fd = None
        if self._closer is not None:
            self._closer()  # closes the descriptor once, here or at garbage collection
        for view in (self._data, self._offsets):
            view.release()
        with contextlib.suppress(BufferError):  # a slice still in use: freed with it
            self._map.close()

    # ------------------------------------------------------------ reading
    def __len__(self) -> int:
        private = self._private
        return self._layout.length if private is None else len(private)

    def _record(self, index: int) -> Any:
        offsets = self._offsets
        return marshal.loads(self._data[offsets[index] : offsets[index + 1]])

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> Any: ...

    def __getitem__(self, index: Any) -> Any:
        count = self._layout.length
        if type(index) is int and 0 <= index < count and self._private is None:
            return self._record(index)
        if self._private is not None:
            return self._private[index]
        if isinstance(index, slice):
            return self._layout.kind(map(self._record, range(*index.indices(count))))
        try:
            position = index.__index__()
        except AttributeError:
            raise TypeError(
                f"{self._layout.kind.__name__} indices must be integers or slices, "
                f"not {type(index).__name__}"
            ) from None
        if position < 0:
            position += count
        if not 0 <= position < count:
            raise IndexError(f"{self._layout.kind.__name__} index out of range")
        return self._record(position)

    def __iter__(self) -> Iterator[Any]:
        if self._private is not None:
            return iter(self._private)
        return map(self._record, range(self._layout.length))

    def __reversed__(self) -> Iterator[Any]:
        if self._private is not None:
            backwards: Iterator[Any] = reversed(self._private)
            return backwards
        return map(self._record, range(self._layout.length - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordTable):
            return self._layout.kind is other._layout.kind and list(self) == list(other)
        if type(other) is self._layout.kind:
            items = cast(Sequence[Any], other)
            return len(items) == len(self) and all(a == b for a, b in zip(self, items, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        if self._layout.kind is not tuple:
            raise TypeError("unhashable type: 'list'")
        return hash(tuple(self))

    def __add__(self, other: Any) -> Any:
        return self._layout.kind(self) + other

    def __radd__(self, other: Any) -> Any:
        return other + self._layout.kind(self)

    def __repr__(self) -> str:
        if self._private is not None:
            return f"RecordTable(changed into a private list of {len(self._private):,} records)"
        return (
            f"RecordTable({len(self):,} records of a {self._layout.kind.__name__}, "
            f"{self._map.__len__():,} bytes shared)"
        )

    # ------------------------------------------------------------ changing (a list's)
    def _writable(self, operation: str) -> list[Any]:
        """This process's private list of the records, made on the first change; a tuple's
        table raises what a tuple would."""
        if self._layout.kind is tuple:
            if operation == "assignment":
                raise TypeError("'tuple' object does not support item assignment")
            if operation == "deletion":
                raise TypeError("'tuple' object doesn't support item deletion")
            raise AttributeError(f"'tuple' object has no attribute '{operation}'")
        if self._private is None:
            self._private = list(map(self._record, range(self._layout.length)))
        return self._private

    def __setitem__(self, index: Any, value: Any) -> None:
        self._writable("assignment")[index] = value

    def __delitem__(self, index: Any) -> None:
        del self._writable("deletion")[index]

    def __iadd__(self, other: Any) -> Any:
        if self._layout.kind is tuple:
            return NotImplemented  # t += x makes a new tuple, as for a tuple
        self._writable("extend").extend(other)
        return self

    def append(self, value: Any) -> None:
        self._writable("append").append(value)

    def extend(self, values: Any) -> None:
        self._writable("extend").extend(values)

    def insert(self, index: int, value: Any) -> None:
        self._writable("insert").insert(index, value)

    def pop(self, index: int = -1) -> Any:
        return self._writable("pop").pop(index)

    def remove(self, value: Any) -> None:
        self._writable("remove").remove(value)

    def clear(self) -> None:
        self._writable("clear").clear()

    def sort(self, *, key: Any = None, reverse: bool = False) -> None:
        self._writable("sort").sort(key=key, reverse=reverse)

    def reverse(self) -> None:
        self._writable("reverse").reverse()


def fcntl_seal(fd: int) -> None:
    """Forbid any later write, growth or shrinking of the file (kernel-enforced)."""
    seals = [getattr(fcntl, name, 0) for name in ("F_SEAL_WRITE", "F_SEAL_GROW", "F_SEAL_SHRINK")]
    if hasattr(fcntl, "F_ADD_SEALS"):
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals[0] | seals[1] | seals[2] | fcntl.F_SEAL_SEAL)


def _encode(fd: int, records: list[Any] | tuple[Any, ...]) -> TableLayout:
    """Write every record's marshal bytes, then the offsets, to ``fd``."""
    count = len(records)
    offsets = np.empty(count + 1, dtype=np.uint64)
    offsets[0] = end = 0
    for start in range(0, count, _CHUNK):
        chunk = records[start : start + _CHUNK]
        _check_plain(chunk, start)
        blobs = list(map(marshal.dumps, chunk, repeat(_MARSHAL_VERSION)))
        lengths = np.fromiter(map(len, blobs), dtype=np.uint64, count=len(blobs))
        window = offsets[start + 1 : start + 1 + len(blobs)]
        np.cumsum(lengths, out=window)
        window += end
        joined = b"".join(blobs)
        del blobs
        _write_all(fd, joined)
        end += len(joined)
    offset_bytes = 4 if end < 2**32 else 8
    layout = TableLayout(os.urandom(8).hex(), type(records), count, end, offset_bytes)
    _write_all(fd, bytes(layout.offsets_start - end))
    packed = offsets if offset_bytes == 8 else offsets.astype(np.uint32)
    _write_all(fd, packed.data.cast("B"))
    return layout
