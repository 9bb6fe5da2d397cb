"""Reordering: the buffered, seedable ``shuffle``."""

from __future__ import annotations

from collections.abc import Sized
from typing import TypeVar

from conveyor.datapipes.base import Cursor, IterDataPipe, SourceCursor, StateDict, as_iter_pipe
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.iter.sampling import Sampler
from conveyor.datapipes.positions import Position, PositionTable
from conveyor.datapipes.rng import ShuffleSettings, SplitMix64, draw_seed

__all__ = ["SamplerIterDataPipe", "Shuffler", "ShufflerIterDataPipe"]

T = TypeVar("T")


class Shuffler(IterDataPipe[T], ShuffleSettings):
    """Shuffles with a buffer of ``buffer_size`` items (functional name: ``shuffle``).

    Same contract as torch's Shuffler: the buffer is filled, then every new item replaces
    a random buffered one, which is yielded; ``buffer_size`` >= the stream length gives a
    full shuffle. ``set_seed(seed)`` fixes the order of the *next* pass only (as torch,
    the seed is used once); without one, each pass draws a seed from torch's global
    generator, so ``torch.manual_seed`` makes runs repeat and ``apply_random_seed`` changes
    the order every epoch. ``set_shuffle(False)`` passes items through. The order differs
    from torch's for the same seed (another generator, whose state is one int).
    """

    def __init__(
        self, datapipe: IterDataPipe[T], *, buffer_size: int = 10000, unbatch_level: int = 0
    ) -> None:
        if buffer_size <= 0:
            raise AssertionError("buffer_size should be larger than 0")
        source = as_iter_pipe(datapipe, type(self).__name__)
        if unbatch_level != 0:
            from conveyor.datapipes.iter.grouping import UnBatcher

            source = UnBatcher(source, unbatch_level)
        self.datapipe: IterDataPipe[T] = source
        self.buffer_size = buffer_size
        self._enabled = True
        self._seed: int | None = None

    def _take_seed(self) -> int:
        seed = self._seed if self._seed is not None else draw_seed()
        self._seed = None
        return seed

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        return _ShufflerCursor(self, state)

    def __len__(self) -> int:
        if isinstance(self.datapipe, Sized):
            return len(self.datapipe)
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class _ShufflerCursor(SourceCursor[T]):
    """The buffer, and beside it where each buffered item came from when the input can
    read items again (`conveyor.datapipes.positions`): then the state holds positions,
    never items, and resuming reads the buffered items again."""

    def __init__(self, node: Shuffler[T], state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "Shuffler")
        self._size = node.buffer_size
        self._rng = SplitMix64(0)
        self._table: PositionTable | None = None
        if state is not None:
            self._enabled = bool(state["enabled"])
            self._rng.state = int(state["rng"])
            self._done = bool(state["done"])
            self._buffer: list[T] = self._restored_buffer(state)
            if self._enabled and self._table is None and not self._buffer:
                self._table = self._new_table()
        else:
            self._enabled = node._enabled
            if self._enabled:
                self._rng = SplitMix64(node._take_seed())
            self._buffer = []
            self._done = False
            if self._enabled:
                self._table = self._new_table()

    def _new_table(self) -> PositionTable | None:
        """Positions beside the items, when the input can read items again."""
        return PositionTable(self._size) if self.source.can_reread() else None

    def _restored_buffer(self, state: StateDict) -> list[T]:
        saved = state.get("positions")
        if saved is None:
            return list(state["buffer"])
        if not self.source.can_reread():
            raise ValueError(
                "Shuffler: this state holds the positions of its buffered items, but the "
                "input here cannot read items again; resume with the same pipeline"
            )
        self._table = PositionTable.from_state(saved, self._size)
        return list(self.source.reread(self._table.positions()))

    def _position(self) -> Position:
        position = self.source.item_position()
        if position is None:
            raise RuntimeError(
                "Shuffler: the input said it can read items again, but gave "
                "no position for the item it returned"
            )
        return position

    def next(self) -> T:
        if not self._enabled:
            value: T = self.source.nonblocking_next()
            return value
        buffer, table = self._buffer, self._table
        while not self._done:
            try:
                incoming = self.source.nonblocking_next()
            except StopIteration:
                self._done = True
                break
            if len(buffer) < self._size:
                buffer.append(incoming)
                if table is not None:
                    table.append(self._position())
                continue
            index = self._rng.below(self._size)
            out, buffer[index] = buffer[index], incoming
            if table is not None:
                table.replace(index, self._position())
            return out
        if not buffer:
            raise StopIteration
        index = self._rng.below(len(buffer))
        buffer[index], buffer[-1] = buffer[-1], buffer[index]
        if table is not None:
            table.swap_pop(index)
        return buffer.pop()

    def extra_state(self) -> StateDict:
        table = self._table
        return {
            "enabled": self._enabled,
            "rng": self._rng.state,
            "buffer": None if table is not None else list(self._buffer),
            "positions": None if table is None else table.state(),
            "done": self._done,
        }


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
ShufflerIterDataPipe = Shuffler
SamplerIterDataPipe = Sampler
register_op("iter.shuffle", Shuffler)
