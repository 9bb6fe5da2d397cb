"""Operations that keep some items: ``filter`` and ``header``."""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import Any, TypeVar

from conveyor.datapipes.base import Cursor, IterDataPipe, SourceCursor, StateDict, as_iter_pipe
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.iter.columns import call_on_columns, validate_input_col
from conveyor.datapipes.utils.common import _check_unpickable_fn

__all__ = ["Filter", "FilterIterDataPipe", "Header"]

T = TypeVar("T")


class Filter(IterDataPipe[T]):
    """Keeps the items for which ``filter_fn`` returns True (functional name: ``filter``).

    Same as torch's Filter: ``input_col`` selects what ``filter_fn`` receives, and a
    non-bool result raises `ValueError`.
    """

    def __init__(
        self, datapipe: IterDataPipe[T], filter_fn: Callable[..., bool], input_col: Any = None
    ) -> None:
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        _check_unpickable_fn(filter_fn)
        self.filter_fn = filter_fn
        self.input_col = input_col
        validate_input_col(filter_fn, input_col)

    def _keep(self, data: Any) -> bool:
        condition = call_on_columns(self.filter_fn, data, self.input_col)
        if not isinstance(condition, bool):
            raise ValueError(
                "Boolean output is required for `filter_fn` of Filter, got", type(condition)
            )
        return condition

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        return _FilterCursor(self, state)


class _FilterCursor(SourceCursor[T]):
    def __init__(self, node: Filter[T], state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "Filter")
        self._keep = node._keep

    def next(self) -> T:
        while True:
            value: T = self.source.nonblocking_next()
            if self._keep(value):
                return value


class Header(IterDataPipe[T]):
    """Yields at most the first ``limit`` items (functional name: ``header``).

    Same as torchdata's Header; ``limit=None`` passes everything through. The input is not
    pulled past the limit.
    """

    def __init__(self, datapipe: IterDataPipe[T], limit: int | None = 10) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"Header: `limit` must be >= 0 or None, got {limit}")
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        self.limit = limit

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        return _HeaderCursor(self, state)

    def __len__(self) -> int:
        if isinstance(self.datapipe, Sized):
            size = len(self.datapipe)
            return size if self.limit is None else min(size, self.limit)
        if self.limit is not None:
            return self.limit
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class _HeaderCursor(SourceCursor[T]):
    def __init__(self, node: Header[T], state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "Header")
        self._limit = node.limit
        self._count = int(state["count"]) if state else 0

    def next(self) -> T:
        if self._limit is not None and self._count >= self._limit:
            raise StopIteration
        value: T = self.source.nonblocking_next()
        self._count += 1
        return value

    def extra_state(self) -> StateDict:
        return {"count": self._count}


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
FilterIterDataPipe = Filter
register_op("iter.filter", Filter)
register_op("iter.header", Header)
