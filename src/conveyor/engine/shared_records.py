"""Large lists of plain records reach worker processes as shared tables, with no code change.

A dataset that is, or holds as attributes, a list or tuple of at least `SHARE_MIN_RECORDS`
plain records (str, bytes, int, float, bool, None and tuples of these) - or a dict of such
lists - gets a *worker view*: a shallow copy of the dataset whose attributes are
`RecordTable` objects instead (the user's objects are never changed). Process workers
read that view, so no page of the user's list is ever written in a worker (no
copy-on-read), and spawn/forkserver workers receive the tables' descriptors instead of a
pickle of every record.

Semantics stay torch's: workers started at ``iter()`` see the data as it is then. A tuple
cannot change; a list is compared with a snapshot of its items taken when its table was
built (``==``, one pointer comparison an item while nothing changed: ~1 ms per million)
and rebuilt when it differs. See docs/design/shared-records.md.
"""

from __future__ import annotations

import copy
import os
import weakref
from collections.abc import Callable
from multiprocessing import context as mp_context
from multiprocessing import reduction
from typing import Any, NamedTuple

from conveyor.torch_compat import TorchDataset
from conveyor.transport.record_table import (
    NotPlainError,
    RecordTable,
    TableLayout,
    can_share_memory,
)

__all__ = ["ENV_SHARE_RECORDS", "SHARE_MIN_RECORDS", "RecordSharing", "share_records_default"]

ENV_SHARE_RECORDS = "CONVEYOR_SHARE_RECORDS"
"""``0`` (or ``false``/``no``/``off``) makes ``share_records=False`` the default."""

SHARE_MIN_RECORDS = 100_000
"""Shorter lists are left alone: a worker's private copy of one costs ~10 MB at most, and
the table would cost the time to build it at every change."""

_MAX_DEPTH = 4  # dataset -> attribute -> nested dataset (Subset.dataset) -> its attribute
_MAX_MEMBERS = 64  # a list of datasets this long at most is looked into (ConcatDataset)


def share_records_default() -> bool:
    """True unless ``CONVEYOR_SHARE_RECORDS`` says no."""
    value = os.environ.get(ENV_SHARE_RECORDS, "").strip().lower()
    return value not in ("0", "false", "no", "off")


class _Entry(NamedTuple):
    """One list or tuple seen by a walk: its table, or None when it cannot be shared."""

    source: list[Any] | tuple[Any, ...]  # kept alive, so its id names it
    snapshot: list[Any] | None  # a list's items when the table was built
    length: int
    table: RecordTable | None


class SharedView(NamedTuple):
    """A dataset as workers get it, and the attribute paths now read from tables."""

    dataset: Any
    shared: tuple[str, ...]


class RecordSharing:
    """The shared tables of one loader; they live until `close()` (or the loader's end).

    Not thread-safe: one loader starts its iterators from one thread at a time.
    """

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self.last_shared: tuple[str, ...] = ()  # attribute paths of the latest view
        self._uncopyable: dict[int, Any] = {}  # objects whose copy lost attributes, by id
        self._finalizer = weakref.finalize(self, _close_entries, self._entries)

    def worker_view(self, dataset: Any) -> SharedView:
        """``dataset`` with its large plain lists replaced by tables (built or reused)."""
        if not can_share_memory() or not self._finalizer.alive:  # none, or closed
            return SharedView(dataset, ())
        walk = _Walk(self._table_for, self._uncopyable)
        view = walk.substitute(dataset, 0, "")
        for key in set(self._entries) - walk.used:
            _close_entry(self._entries.pop(key))  # workers that mapped it keep their mapping
        self.last_shared = tuple(walk.shared)
        return SharedView(view, self.last_shared)

    def _table_for(self, items: list[Any] | tuple[Any, ...]) -> RecordTable | None:
        entry = self._entries.get(id(items))
        if entry is not None and entry.source is items and _unchanged(entry, items):
            return entry.table
        if entry is not None:
            _close_entry(self._entries.pop(id(items)))
        try:
            table: RecordTable | None = RecordTable(items)
        except NotPlainError:
            table = None
        except OSError:
            return None  # no shared memory to be had: workers read the list, as torch's do
        snapshot = list(items) if type(items) is list and table is not None else None
        self._entries[id(items)] = _Entry(items, snapshot, len(items), table)
        return table

    def close(self) -> None:
        """Drop this process's descriptors and mappings of every table. Idempotent."""
        self._finalizer()


def _unchanged(entry: _Entry, items: list[Any] | tuple[Any, ...]) -> bool:
    if len(items) != entry.length:
        return False
    if entry.snapshot is None:  # a tuple, or a list that could not be shared
        return True
    return entry.snapshot == items


def _close_entry(entry: _Entry) -> None:
    if entry.table is not None:
        entry.table.close()


def _close_entries(entries: dict[int, _Entry]) -> None:
    while entries:
        _close_entry(entries.popitem()[1])


class _Walk:
    """One pass over a dataset's attributes, building the worker view bottom-up."""

    def __init__(self, table_for: Callable[[Any], RecordTable | None], uncopyable: dict[int, Any]):
        self._table_for = table_for
        self._uncopyable = uncopyable
        self.used: set[int] = set()
        self.shared: list[str] = []
        self._views: dict[int, Any] = {}  # object id -> its view: shared objects stay shared

    def substitute(self, value: Any, depth: int, path: str) -> Any:
        kind = type(value)
        if kind is list or kind is tuple:
            if len(value) >= SHARE_MIN_RECORDS:
                return self._shared(value, path)
            return self._members(value, depth, path)
        if kind is dict and depth > 0 and len(value) <= _MAX_MEMBERS:
            return self._dict(value, depth, path)
        if depth == 0 or isinstance(value, TorchDataset):
            return self._object(value, depth, path)
        return value

    def _shared(self, items: list[Any] | tuple[Any, ...], path: str) -> Any:
        table = self._table_for(items)
        self.used.add(id(items))
        if table is None:
            return items
        self.shared.append(path or "dataset")
        return table

    def _members(self, items: list[Any] | tuple[Any, ...], depth: int, path: str) -> Any:
        """A short list of datasets (``ConcatDataset.datasets``): each one's view."""
        if depth == 0 or depth >= _MAX_DEPTH or len(items) > _MAX_MEMBERS:
            return items
        views = [self.substitute(v, depth + 1, f"{path}[{i}]") for i, v in enumerate(items)]
        if all(v is o for v, o in zip(views, items, strict=True)):
            return items
        return type(items)(views)

    def _dict(self, mapping: dict[Any, Any], depth: int, path: str) -> Any:
        """A dict of lists (``{"paths": [...], "labels": [...]}``): a new dict of tables."""
        views = {
            key: self._shared(value, f"{path}[{key!r}]")
            if type(value) in (list, tuple) and len(value) >= SHARE_MIN_RECORDS
            else value
            for key, value in mapping.items()
        }
        if all(views[key] is value for key, value in mapping.items()):
            return mapping
        return views

    def _object(self, obj: Any, depth: int, path: str) -> Any:
        if id(obj) in self._views:
            return self._views[id(obj)]
        if depth >= _MAX_DEPTH or id(obj) in self._uncopyable:
            return obj
        self._views[id(obj)] = obj  # a cycle back to it meets the object itself
        try:
            attributes = vars(obj)
        except TypeError:
            return obj  # no __dict__ (slots): nothing to look into
        marks = (len(self.shared), set(self.used))
        replaced = {}
        for name, value in list(attributes.items()):
            view = self.substitute(value, depth + 1, f"{path}.{name}" if path else name)
            if view is not value:
                replaced[name] = view
        if not replaced:
            return obj
        clone = _copy_with(obj, attributes, replaced)
        if clone is obj:  # remembered, so its tables are not built again at every epoch
            self._uncopyable[id(obj)] = obj
            del self.shared[marks[0] :]
            self.used = marks[1]
        self._views[id(obj)] = clone
        return clone


def _copy_with(obj: Any, attributes: dict[str, Any], replaced: dict[str, Any]) -> Any:
    """A shallow copy of ``obj`` with ``replaced`` attributes; ``obj`` itself when its copy
    does not carry its attributes over (a custom ``__copy__``/``__reduce__``)."""
    try:
        clone = copy.copy(obj)
        clone_attributes = vars(clone)
    except Exception:
        return obj
    if clone is obj or any(clone_attributes.get(n) is not attributes[n] for n in replaced):
        return obj
    clone_attributes.update(replaced)  # straight into __dict__: no __setattr__ runs
    return clone


# ------------------------------------------------------------------ spawned directly
def _reduce_for_process_start(table: RecordTable) -> tuple[Any, ...]:
    """`Process.start` under spawn/forkserver passes the descriptor itself (DupFd)."""
    fd = table.shared_fd()
    if fd is None or mp_context.get_spawning_popen() is None:
        return table.__reduce__()  # outside a process start: the plain list
    return (_attach_duplicate, (reduction.DupFd(fd), table.layout))


def _attach_duplicate(duplicate: Any, layout: TableLayout) -> RecordTable:
    fd = duplicate.detach()
    try:
        return RecordTable.attach(fd, layout)
    finally:
        os.close(fd)


reduction.ForkingPickler.register(RecordTable, _reduce_for_process_start)
