"""Operations that yield items more than once: ``cycle``, ``repeat``, ``in_memory_cache``."""

from __future__ import annotations

import sys
from collections.abc import Sized
from typing import Any, TypeVar

from conveyor.datapipes.base import (
    Cursor,
    IterDataPipe,
    SourceCursor,
    StateDict,
    as_iter_pipe,
    check_version,
    sub_state,
)
from conveyor.datapipes.functional import register_op

__all__ = ["Cycler", "InMemoryCacheHolder", "Repeater"]

T = TypeVar("T")


class Cycler(IterDataPipe[T]):
    """The whole input ``count`` times, or forever if None (functional name: ``cycle``).

    Same as torchdata's Cycler; each pass restarts the input (a new epoch for it). Unlike
    torchdata, an input that yields nothing ends the cycle instead of spinning forever.
    """

    def __init__(self, source_datapipe: IterDataPipe[T], count: int | None = None) -> None:
        if count is not None and count < 0:
            raise ValueError(f"Expected non-negative count, got {count}")
        self.source_datapipe = as_iter_pipe(source_datapipe, type(self).__name__)
        self.count = count

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        return _CyclerCursor(self, state)

    def __len__(self) -> int:
        if self.count is None:
            raise TypeError(f"{type(self).__name__} instance cycles forever, so it has no length")
        if isinstance(self.source_datapipe, Sized):
            return self.count * len(self.source_datapipe)
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class _CyclerCursor(SourceCursor[T]):
    def __init__(self, node: Cycler[T], state: StateDict | None) -> None:
        super().__init__(node.source_datapipe, state, "Cycler")
        self._count = node.count
        self._passes = int(state["passes"]) if state else 0
        self._yielded = int(state["yielded"]) if state else 0

    def next(self) -> T:
        while self._count is None or self._passes < self._count:
            try:
                value: T = self.source.nonblocking_next()
            except StopIteration:
                if self._yielded == 0:
                    self._passes = self._count if self._count is not None else self._passes
                    raise
                self._passes += 1
                self._yielded = 0
                self.source._restart(None)
                continue
            self._yielded += 1
            return value
        raise StopIteration

    def extra_state(self) -> StateDict:
        return {"passes": self._passes, "yielded": self._yielded}


class Repeater(IterDataPipe[T]):
    """Every item ``times`` times in a row (functional name: ``repeat``).

    Same as torchdata's Repeater, except that ``times == 1`` is allowed (a no-op).
    """

    def __init__(self, source_datapipe: IterDataPipe[T], times: int) -> None:
        if times < 1:
            raise ValueError(f"The number of repetition must be >= 1, got {times}")
        self.source_datapipe = as_iter_pipe(source_datapipe, type(self).__name__)
        self.times = times

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        return _RepeaterCursor(self, state)

    def __len__(self) -> int:
        if isinstance(self.source_datapipe, Sized):
            return self.times * len(self.source_datapipe)
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class _RepeaterCursor(SourceCursor[T]):
    def __init__(self, node: Repeater[T], state: StateDict | None) -> None:
        super().__init__(node.source_datapipe, state, "Repeater")
        self._times = node.times
        self._left = int(state["left"]) if state else 0
        self._value: Any = state["value"] if state else None

    def next(self) -> T:
        if self._left == 0:
            self._value = self.source.nonblocking_next()
            self._left = self._times
        self._left -= 1
        value: T = self._value
        return value

    def extra_state(self) -> StateDict:
        return {"left": self._left, "value": self._value if self._left else None}


def _approx_bytes(value: object) -> int:
    nbytes = getattr(value, "nbytes", None)
    return nbytes if isinstance(nbytes, int) else sys.getsizeof(value)


class InMemoryCacheHolder(IterDataPipe[T]):
    """Keeps the first full pass in memory and replays it (``in_memory_cache``).

    Same as torchdata's InMemoryCacheHolder: ``size`` is a limit in megabytes (None: no
    limit), estimated from ``nbytes`` (tensors, arrays) or ``sys.getsizeof`` (shallow);
    past it, caching stops and later passes read the input again. The cache belongs to
    this pipe object (it is not pickled, and not part of ``state_dict()``: a resumed pass
    that should replay rebuilds the cache from the input while skipping ahead).
    """

    def __init__(self, source_dp: IterDataPipe[T], size: int | None = None) -> None:
        if size is not None and size <= 0:
            raise ValueError(f"InMemoryCacheHolder: `size` must be positive or None, got {size}")
        self.source_dp = as_iter_pipe(source_dp, type(self).__name__)
        self.size = size
        self._cache: list[T] | None = None
        self._complete = False

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_cache"], state["_complete"] = None, False
        return state

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        return _CacheCursor(self, state)

    def __len__(self) -> int:
        if self._complete and self._cache is not None:
            return len(self._cache)
        if isinstance(self.source_dp, Sized):
            return len(self.source_dp)
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class _CacheCursor(Cursor[T]):
    """Replays the cache when complete; otherwise reads the input, filling the cache."""

    def __init__(self, node: InMemoryCacheHolder[T], state: StateDict | None) -> None:
        if state is not None:
            check_version(state, 1, "InMemoryCacheHolder")
        self._node = node
        self._source = node.source_dp
        self._position = int(state["position"]) if state else 0
        self._skip = 0
        self._replay = node._complete and node._cache is not None
        self._bytes = 0
        if self._replay:
            self._source._restart(None)
            return
        resumed_fill = state is not None and not state["replay"]
        self._source._restart(sub_state(state, "source") if resumed_fill else None)
        if not resumed_fill:
            self._skip = self._position  # a replay state without the cache: rebuild it
        self._caching = not resumed_fill or self._position == 0
        node._cache = [] if self._caching else None

    def next(self) -> T:
        node = self._node
        if self._replay:
            assert node._cache is not None
            if self._position >= len(node._cache):
                raise StopIteration
            self._position += 1
            return node._cache[self._position - 1]
        while True:
            try:
                value: T = self._source.nonblocking_next()
            except StopIteration:
                if self._caching:
                    node._complete = True
                raise
            self._remember(value)
            if self._skip:
                self._skip -= 1
                continue
            self._position += 1
            return value

    def _remember(self, value: T) -> None:
        node = self._node
        if not self._caching or node._cache is None:
            return
        self._bytes += _approx_bytes(value)
        if node.size is not None and self._bytes > node.size * 1024 * 1024:
            self._caching, node._cache = False, None
            return
        node._cache.append(value)

    def state(self) -> StateDict:
        # Mid-way through rebuilding, a replay state (rebuild again) is the exact one.
        replay = self._replay or self._skip > 0
        source = None if replay else self._source._held_state()
        return {
            "version": 1,
            "replay": replay,
            "position": self._position,
            "source": source,
        }

    def close(self) -> None:
        self._source.close()


register_op("iter.cycle", Cycler)
register_op("iter.repeat", Repeater)
register_op("iter.in_memory_cache", InMemoryCacheHolder)
