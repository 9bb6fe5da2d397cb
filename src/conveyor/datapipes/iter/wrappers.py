"""Sources: turn an ordinary iterable into an `IterDataPipe`."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import TypeVar

from conveyor.datapipes.base import (
    Cursor,
    DataPipe,
    IterDataPipe,
    MapDataPipe,
    StateDict,
    check_version,
)

__all__ = ["IterableWrapper"]

T = TypeVar("T")


class IterableWrapper(IterDataPipe[T]):
    """Wraps an iterable. Same as ``torch.utils.data.datapipes.iter.IterableWrapper``.

    With ``deepcopy`` (default) every epoch iterates a deep copy made when the epoch starts,
    so in-place changes downstream do not leak into the next epoch. Sequences (list, tuple,
    range, str) resume from a state by index; other iterables by replaying.
    """

    def __init__(self, iterable: Iterable[T], deepcopy: bool = True) -> None:
        self.iterable = iterable
        self.deepcopy = deepcopy

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        return _WrapperCursor(self, state)

    def datapipe_inputs(self) -> list[DataPipe]:
        # Never scan the wrapped data itself: it may be a list of millions of items.
        wrapped = self.iterable
        return [wrapped] if isinstance(wrapped, IterDataPipe | MapDataPipe) else []

    def __len__(self) -> int:
        if isinstance(self.iterable, Sized):
            return len(self.iterable)
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class _WrapperCursor(Cursor[T]):
    def __init__(self, node: IterableWrapper[T], state: StateDict | None) -> None:
        data = node.iterable
        if node.deepcopy:
            try:
                data = copy.deepcopy(data)
            except TypeError:
                warnings.warn(
                    "The input iterable can not be deepcopied, "
                    "please be aware of in-place modification would affect source data.",
                    stacklevel=2,
                )
        self._seq: Sequence[T] | None = data if isinstance(data, Sequence) else None
        self._it: Iterator[T] | None = None if self._seq is not None else iter(data)
        self._index = 0
        if state is not None:
            check_version(state, 1, "IterableWrapper")
            target = int(state["index"])
            if self._it is not None:
                for _ in range(target):
                    next(self._it)
            self._index = target

    def next(self) -> T:
        if self._seq is not None:
            if self._index >= len(self._seq):
                raise StopIteration
            value = self._seq[self._index]
        else:
            assert self._it is not None
            value = next(self._it)
        self._index += 1
        return value

    def state(self) -> StateDict:
        return {"version": 1, "index": self._index}
