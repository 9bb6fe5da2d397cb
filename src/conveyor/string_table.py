"""Many small strings without one Python object each: no copy-on-read in forked workers.

A dataset holding a list of millions of ``str`` (file names, captions) makes every forked
worker copy most of it: reading an item writes its reference count, and the page holding
it becomes private to the worker (pytorch#13246). `StringTable` keeps the characters in
one NumPy buffer plus offsets and builds each ``str`` on access, so workers share the
pages untouched.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

# A container attribute this long in a dataset handed to forked workers earns a warning.
COPY_ON_READ_WARN_LEN = 1_000_000


class StringTable(Sequence[Any]):
    """An immutable sequence of ``str`` (or ``bytes``) stored in two NumPy arrays.

    ``items`` are all ``str`` or all ``bytes``; indexing returns the same type. Memory:
    the encoded characters plus 4 bytes per item (8 past 4 GiB of characters),
    shared between forked workers.

    Args:
        items: the strings (all ``str`` or all ``bytes``).
    """

    __slots__ = ("_as_bytes", "_buffer", "_offsets")

    def __init__(self, items: Iterable[str] | Iterable[bytes]):
        encoded: list[bytes] = []
        as_bytes: bool | None = None
        for item in items:
            is_bytes = isinstance(item, bytes)
            if not is_bytes and not isinstance(item, str):
                raise TypeError(f"StringTable holds str or bytes, got {type(item).__name__}")
            if as_bytes is None:
                as_bytes = is_bytes
            elif as_bytes != is_bytes:
                raise TypeError("StringTable items must be all str or all bytes, not both")
            encoded.append(item if isinstance(item, bytes) else item.encode("utf-8"))
        self._as_bytes = bool(as_bytes)
        lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
        total = int(lengths.sum())
        # 4-byte offsets while the characters fit in 4 GiB: half the per-item overhead
        offsets_dtype = np.uint32 if total < 2**32 else np.int64
        self._offsets = np.zeros(len(encoded) + 1, dtype=offsets_dtype)
        np.cumsum(lengths, out=self._offsets[1:], dtype=offsets_dtype)
        self._buffer = np.frombuffer(b"".join(encoded), dtype=np.uint8)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _item(self, index: int) -> Any:
        start, end = self._offsets[index], self._offsets[index + 1]
        raw = self._buffer[start:end].tobytes()
        return raw if self._as_bytes else raw.decode("utf-8")

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        count = len(self)
        position = index + count if index < 0 else index
        if not 0 <= position < count:
            raise IndexError(f"StringTable index {index} out of range for length {count}")
        return self._item(int(position))

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self._item(i)

    def __repr__(self) -> str:
        kind = "bytes" if self._as_bytes else "str"
        return f"StringTable({len(self)} {kind} items, {self._buffer.nbytes:,} bytes)"

    def __reduce__(self) -> tuple[Any, ...]:
        # spawn/forkserver pickle the arrays (fast), not one object per item
        return (_rebuild, (self._as_bytes, self._buffer, self._offsets))


def _rebuild(
    as_bytes: bool, buffer: np.ndarray[Any, Any], offsets: np.ndarray[Any, Any]
) -> StringTable:
    table = StringTable.__new__(StringTable)
    table._as_bytes, table._buffer, table._offsets = as_bytes, buffer, offsets
    return table


def copy_on_read_risks(dataset: object, shared: Collection[str] = ()) -> list[str]:
    """Attributes of ``dataset`` that are huge Python containers (copied by every worker),
    except those named in ``shared`` (the loader keeps them in shared tables)."""
    try:
        attributes = vars(dataset)
    except TypeError:
        return []
    return [
        name
        for name, value in attributes.items()
        if isinstance(value, (list, tuple, dict))
        and len(value) >= COPY_ON_READ_WARN_LEN
        and name not in shared
    ]


def warn_copy_on_read(dataset: object, stacklevel: int = 4, shared: Collection[str] = ()) -> None:
    """Say so when worker processes are about to copy a huge Python container each."""
    names = copy_on_read_risks(dataset, shared)
    if names:
        warnings.warn(
            f"dataset attribute(s) {', '.join(names)} hold over {COPY_ON_READ_WARN_LEN:,} "
            "Python objects: every worker process will end up with its own copy (reading an "
            "object writes its reference count; pytorch#13246). conveyor shares lists and "
            "tuples of plain records (str, bytes, int, float, bool, None and tuples of "
            "these) by itself unless share_records=False; for other objects, keep them in "
            "a NumPy array, or wrap lists of str/bytes in conveyor.StringTable, to share "
            "one copy.",
            UserWarning,
            stacklevel=stacklevel,
        )
