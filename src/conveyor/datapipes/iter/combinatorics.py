"""Reordering: the buffered, seedable ``shuffle``."""

from __future__ import annotations

from collections.abc import Sized
from typing import TypeVar

from conveyor.datapipes.base import Cursor, IterDataPipe, SourceCursor, StateDict, as_iter_pipe
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.iter.sampling import Sampler
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
    def __init__(self, node: Shuffler[T], state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "Shuffler")
        self._size = node.buffer_size
        self._rng = SplitMix64(0)
        if state is not None:
            self._enabled = bool(state["enabled"])
            self._rng.state = int(state["rng"])
            self._buffer: list[T] = list(state["buffer"])
            self._done = bool(state["done"])
        else:
            self._enabled = node._enabled
            if self._enabled:
                self._rng = SplitMix64(node._take_seed())
            self._buffer = []
            self._done = False

    def next(self) -> T:
        if not self._enabled:
            value: T = self.source.nonblocking_next()
            return value
        buffer = self._buffer
        while not self._done:
            try:
                incoming = self.source.nonblocking_next()
            except StopIteration:
                self._done = True
                break
            if len(buffer) < self._size:
                buffer.append(incoming)
                continue
            index = self._rng.below(self._size)
            out, buffer[index] = buffer[index], incoming
            return out
        if not buffer:
            raise StopIteration
        index = self._rng.below(len(buffer))
        buffer[index], buffer[-1] = buffer[-1], buffer[index]
        return buffer.pop()

    def extra_state(self) -> StateDict:
        return {
            "enabled": self._enabled,
            "rng": self._rng.state,
            "buffer": list(self._buffer),
            "done": self._done,
        }


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
ShufflerIterDataPipe = Shuffler
SamplerIterDataPipe = Sampler
register_op("iter.shuffle", Shuffler)
