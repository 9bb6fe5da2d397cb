"""Operations that group or ungroup items: ``batch``, ``unbatch``, ``groupby``."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Sized
from typing import Any, TypeVar

from conveyor.datapipes.base import (
    Cursor,
    DataChunk,
    IterDataPipe,
    SourceCursor,
    StateDict,
    as_iter_pipe,
)
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.utils.common import _check_unpickable_fn

__all__ = [
    "Batcher",
    "BatcherIterDataPipe",
    "Grouper",
    "GrouperIterDataPipe",
    "UnBatcher",
    "UnBatcherIterDataPipe",
]

T = TypeVar("T")


class Batcher(IterDataPipe[DataChunk[T]]):
    """Lists of ``batch_size`` consecutive items (functional name: ``batch``).

    Same as torch's Batcher: the last batch is shorter unless ``drop_last``; every batch
    is wrapped in ``wrapper_class`` (default `DataChunk`).
    """

    def __init__(
        self,
        datapipe: IterDataPipe[T],
        batch_size: int,
        drop_last: bool = False,
        wrapper_class: type[DataChunk[Any]] | None = None,
    ) -> None:
        if batch_size <= 0:
            raise AssertionError("Batch size is required to be larger than 0!")
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.wrapper_class = DataChunk if wrapper_class is None else wrapper_class

    def _make_cursor(self, state: StateDict | None) -> Cursor[DataChunk[T]]:
        return _BatcherCursor(self, state)

    def __len__(self) -> int:
        if isinstance(self.datapipe, Sized):
            size = len(self.datapipe)
            if self.drop_last:
                return size // self.batch_size
            return (size + self.batch_size - 1) // self.batch_size
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class _BatcherCursor(SourceCursor[DataChunk[T]]):
    def __init__(self, node: Batcher[T], state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "Batcher")
        self._node = node
        self._batch: list[T] = list(state["batch"]) if state else []
        self._done = bool(state["done"]) if state else False

    def next(self) -> DataChunk[T]:
        size = self._node.batch_size
        while not self._done and len(self._batch) < size:
            try:
                self._batch.append(self.source.nonblocking_next())
            except StopIteration:
                self._done = True
        batch, self._batch = self._batch, []
        if not batch or (self._done and len(batch) < size and self._node.drop_last):
            raise StopIteration
        return self._node.wrapper_class(batch)

    def extra_state(self) -> StateDict:
        return {"batch": list(self._batch), "done": self._done}


class UnBatcher(IterDataPipe[Any]):
    """Flattens ``unbatch_level`` levels of lists (functional name: ``unbatch``).

    Same as torch's UnBatcher: ``-1`` flattens every level; an item that is not a list
    where a list was expected raises `IndexError`.
    """

    def __init__(self, datapipe: IterDataPipe[Any], unbatch_level: int = 1) -> None:
        if unbatch_level < -1:
            raise ValueError("unbatch_level must be -1 or >= 0")
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        self.unbatch_level = unbatch_level

    def _flatten(self, element: Any, level: int, out: list[Any]) -> None:
        if level == 0:
            out.append(element)
        elif isinstance(element, list):
            deeper = -1 if level == -1 else level - 1
            for item in element:
                self._flatten(item, deeper, out)
        elif level == -1:
            out.append(element)
        else:
            raise IndexError(
                f"unbatch_level {self.unbatch_level} exceeds the depth of the DataPipe"
            )

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return _UnBatcherCursor(self, state)


class _UnBatcherCursor(SourceCursor[Any]):
    def __init__(self, node: UnBatcher, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "UnBatcher")
        self._node = node
        self._pending: deque[Any] = deque(state["pending"] if state else ())

    def next(self) -> Any:
        while not self._pending:
            flat: list[Any] = []
            self._node._flatten(self.source.nonblocking_next(), self._node.unbatch_level, flat)
            self._pending.extend(flat)
        return self._pending.popleft()

    def extra_state(self) -> StateDict:
        return {"pending": list(self._pending)}


class Grouper(IterDataPipe[Any]):
    """Batches of items with the same ``group_key_fn`` key (functional name: ``groupby``).

    Same as torch's Grouper: a group is yielded once it has ``group_size`` items; when
    ``buffer_size`` items are buffered the largest group is yielded if it has at least
    ``guaranteed_group_size`` items (else dropped with ``drop_remaining``, else
    `RuntimeError`); at the end every remaining group is yielded. ``keep_key`` yields
    ``(key, batch)`` pairs.
    """

    def __init__(
        self,
        datapipe: IterDataPipe[T],
        group_key_fn: Callable[[T], Hashable],
        *,
        keep_key: bool = False,
        buffer_size: int = 10000,
        group_size: int | None = None,
        guaranteed_group_size: int | None = None,
        drop_remaining: bool = False,
    ) -> None:
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        _check_unpickable_fn(group_key_fn)
        self.group_key_fn = group_key_fn
        self.keep_key = keep_key
        self.max_buffer_size = buffer_size
        self.group_size = group_size
        self.guaranteed_group_size: int | None = None
        if group_size is not None and buffer_size is not None:
            if not 0 < group_size <= buffer_size:
                raise AssertionError("group_size must be > 0 and <= buffer_size")
            self.guaranteed_group_size = group_size
        if guaranteed_group_size is not None:
            if group_size is None or not 0 < guaranteed_group_size <= group_size:
                raise AssertionError(
                    "guaranteed_group_size must be > 0 and <= group_size and group_size must be set"
                )
            self.guaranteed_group_size = guaranteed_group_size
        self.drop_remaining = drop_remaining

    def _emit(self, key: Hashable, items: list[Any]) -> Any:
        chunk = DataChunk(items)
        return (key, chunk) if self.keep_key else chunk

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return _GrouperCursor(self, state)


class _GrouperCursor(SourceCursor[Any]):
    def __init__(self, node: Grouper, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "Grouper")
        self._node = node
        groups = state["groups"] if state else []
        self._groups: dict[Hashable, list[Any]] = {key: list(items) for key, items in groups}
        self._size = sum(len(items) for items in self._groups.values())
        self._out: deque[Any] = deque(state["out"] if state else ())
        self._done = bool(state["done"]) if state else False

    def next(self) -> Any:
        while not self._out:
            if self._done:
                if not self._groups:
                    raise StopIteration
                key = next(iter(self._groups))
                items = self._groups.pop(key)
                self._size -= len(items)
                return self._node._emit(key, items)
            try:
                value = self.source.nonblocking_next()
            except StopIteration:
                self._done = True
                continue
            self._add(value)
        return self._out.popleft()

    def _add(self, value: Any) -> None:
        node = self._node
        key = node.group_key_fn(value)
        group = self._groups.setdefault(key, [])
        group.append(value)
        self._size += 1
        if node.group_size is not None and len(group) == node.group_size:
            self._out.append(node._emit(key, self._groups.pop(key)))
            self._size -= len(group)
        if self._size == node.max_buffer_size:
            self._evict_largest(key)

    def _evict_largest(self, last_key: Hashable) -> None:
        node = self._node
        biggest = max(self._groups, key=lambda k: len(self._groups[k]))
        items = self._groups.pop(biggest)
        self._size -= len(items)
        minimum = node.guaranteed_group_size
        if minimum is not None and len(items) < minimum and not node.drop_remaining:
            raise RuntimeError("Failed to group items", str(items))
        if minimum is None or len(items) >= minimum:
            # torch pairs an evicted group with the key of the item just added; keep that.
            self._out.append(node._emit(last_key, items))

    def extra_state(self) -> StateDict:
        return {
            "groups": [(key, list(items)) for key, items in self._groups.items()],
            "out": list(self._out),
            "done": self._done,
        }


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
BatcherIterDataPipe = Batcher
UnBatcherIterDataPipe = UnBatcher
GrouperIterDataPipe = Grouper


def __getattr__(name: str) -> Any:
    """torch's old home of ``SHARDING_PRIORITIES``, with torch's deprecation warning."""
    if name == "SHARDING_PRIORITIES":
        import warnings

        from conveyor.datapipes.iter.sharding import SHARDING_PRIORITIES

        warnings.warn(
            "`SHARDING_PRIORITIES` from the `conveyor.datapipes.iter.grouping` module will be "
            "removed. Please use `SHARDING_PRIORITIES` from the "
            "`conveyor.datapipes.iter.sharding` module instead.",
            FutureWarning,
            stacklevel=2,
        )
        return SHARDING_PRIORITIES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


register_op("iter.batch", Batcher)
register_op("iter.unbatch", UnBatcher)
register_op("iter.groupby", Grouper)
