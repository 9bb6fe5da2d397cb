"""Operations that read several inputs: ``concat``, ``zip``, ``mux``, ``greedy_join``."""

from __future__ import annotations

from collections import deque
from collections.abc import Sized
from typing import Any, ClassVar

from conveyor.datapipes.base import (
    Cursor,
    IterDataPipe,
    NotAvailable,
    StateDict,
    check_version,
)
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.iter.branching import Demultiplexer, Forker
from conveyor.engine.offload.channel import Doorbell

__all__ = [
    "Concater",
    "ConcaterIterDataPipe",
    "DemultiplexerIterDataPipe",
    "ForkerIterDataPipe",
    "GreedyJoiner",
    "Multiplexer",
    "MultiplexerIterDataPipe",
    "Zipper",
    "ZipperIterDataPipe",
]


def _check_inputs(datapipes: tuple[Any, ...], who: str, at_least: int) -> None:
    if len(datapipes) < at_least:
        raise ValueError("Expected at least one DataPipe, but got nothing")
    if not all(isinstance(dp, IterDataPipe) for dp in datapipes):
        raise TypeError(f"Expected all inputs to be `IterDataPipe` for {who}")


def _lengths(datapipes: tuple[IterDataPipe[Any], ...], who: str) -> list[int]:
    if all(isinstance(dp, Sized) for dp in datapipes):
        return [len(dp) for dp in datapipes]  # type: ignore[arg-type]
    raise TypeError(f"{who} instance doesn't have valid length")


class _Combiner(IterDataPipe[Any]):
    """Base of nodes over ``self.datapipes``; subclasses name their cursor class."""

    cursor_class: ClassVar[type[_MultiCursor]]
    min_inputs: ClassVar[int] = 1

    def __init__(self, *datapipes: IterDataPipe[Any]) -> None:
        _check_inputs(datapipes, type(self).__name__, self.min_inputs)
        self.datapipes = datapipes

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return self.cursor_class(self, state)


class _MultiCursor(Cursor[Any]):
    """Restarts every input, nests their states under ``"sources"``, closes them."""

    def __init__(self, node: _Combiner, state: StateDict | None) -> None:
        if state is not None:
            check_version(state, 1, type(node).__name__)
        self.sources = node.datapipes
        states = state["sources"] if state else [None] * len(self.sources)
        for source, sub in zip(self.sources, states, strict=True):
            source._restart(sub)

    def state(self) -> StateDict:
        sources = [source._held_state() for source in self.sources]
        return {"version": 1, "sources": sources, **self.extra_state()}

    def extra_state(self) -> StateDict:
        return {}

    def close(self) -> None:
        for source in self.sources:
            source.close()


class _ConcatCursor(_MultiCursor):
    def __init__(self, node: _Combiner, state: StateDict | None) -> None:
        super().__init__(node, state)
        self._index = int(state["index"]) if state else 0

    def next(self) -> Any:
        while self._index < len(self.sources):
            try:
                return self.sources[self._index].nonblocking_next()
            except StopIteration:
                self._index += 1
        raise StopIteration

    def extra_state(self) -> StateDict:
        return {"index": self._index}


class Concater(_Combiner):
    """All items of the first input, then of the next... (functional name: ``concat``).

    Same as torch's Concater.
    """

    cursor_class = _ConcatCursor

    def __len__(self) -> int:
        return sum(_lengths(self.datapipes, type(self).__name__))


class _ZipCursor(_MultiCursor):
    def __init__(self, node: _Combiner, state: StateDict | None) -> None:
        super().__init__(node, state)
        self._row: list[Any] = list(state["row"]) if state else []
        self._done = bool(state["done"]) if state else False

    def next(self) -> Any:
        if self._done or not self.sources:
            raise StopIteration
        try:
            while len(self._row) < len(self.sources):
                self._row.append(self.sources[len(self._row)].nonblocking_next())
        except StopIteration:
            self._done, self._row = True, []
            raise
        row, self._row = tuple(self._row), []
        return row

    def extra_state(self) -> StateDict:
        return {"row": list(self._row), "done": self._done}


class Zipper(_Combiner):
    """Tuples of one item from each input, until one ends (functional name: ``zip``).

    Same as torch's Zipper.
    """

    cursor_class = _ZipCursor
    min_inputs = 0

    def __len__(self) -> int:
        return min(_lengths(self.datapipes, type(self).__name__), default=0)


class _MuxCursor(_ZipCursor):
    def __init__(self, node: _Combiner, state: StateDict | None) -> None:
        super().__init__(node, state)
        self._out: deque[Any] = deque(state["out"] if state else ())

    def next(self) -> Any:
        if not self._out:
            self._out.extend(super().next())
        return self._out.popleft()

    def extra_state(self) -> StateDict:
        return {**super().extra_state(), "out": list(self._out)}


class Multiplexer(_Combiner):
    """One item from each input in turn (functional name: ``mux``).

    Same as torch's Multiplexer: it stops when any input ends, dropping the unfinished
    round.
    """

    cursor_class = _MuxCursor
    min_inputs = 0

    def __len__(self) -> int:
        return min(_lengths(self.datapipes, type(self).__name__), default=0) * len(self.datapipes)


class _JoinCursor(_MultiCursor):
    def __init__(self, node: _Combiner, state: StateDict | None) -> None:
        super().__init__(node, state)
        self._next = int(state["next"]) if state else 0
        self._live = list(state["live"]) if state else [True] * len(self.sources)
        self._bell = Doorbell()

    def next(self) -> Any:
        while True:
            since = self._bell.generation
            pending = []
            count = len(self.sources)
            for step in range(count):
                i = (self._next + step) % count
                if not self._live[i]:
                    continue
                try:
                    value = self.sources[i].nonblocking_next()
                except StopIteration:
                    self._live[i] = False
                    continue
                except NotAvailable as waiting:
                    pending.append(waiting)
                    continue
                self._next = (i + 1) % count
                return value
            if not pending:
                raise StopIteration
            self._wait_any(pending, since)

    def _wait_any(self, pending: list[NotAvailable], since: int) -> None:
        """Raise a NotAvailable that wakes when any input may be ready; return to re-poll."""
        changed = False
        for waiting in pending:
            if waiting.bell is None:
                raise NotAvailable()  # an input gives no bell: the caller backs off
            waiting.bell.forward_to(self._bell)
            changed = changed or waiting.changed()
        if not changed:
            raise NotAvailable(self._bell, since)

    def extra_state(self) -> StateDict:
        return {"next": self._next, "live": list(self._live)}


class GreedyJoiner(_Combiner):
    """Items from whichever input has one ready first (functional name: ``greedy_join``).

    The RFC's ``GreedyJoin``. Inputs are polled round-robin with ``nonblocking_next``,
    starting after the one served last, so inputs that are always ready (plain in-line
    pipes) come out in turn and the order is deterministic; inputs behind ``prefetch`` or
    ``run_in_process`` are served as they become ready. Ends when every input has ended.
    Waiting is on the inputs' doorbells, never by polling in a loop.
    """

    cursor_class = _JoinCursor

    def __len__(self) -> int:
        return sum(_lengths(self.datapipes, type(self).__name__))


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
ConcaterIterDataPipe = Concater
ZipperIterDataPipe = Zipper
MultiplexerIterDataPipe = Multiplexer
ForkerIterDataPipe = Forker
DemultiplexerIterDataPipe = Demultiplexer
register_op("iter.concat", Concater)
register_op("iter.zip", Zipper)
register_op("iter.mux", Multiplexer)
register_op("iter.greedy_join", GreedyJoiner)
