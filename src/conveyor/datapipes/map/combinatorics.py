"""Map-style ``shuffle``: a seeded permutation of the indices, as an iterable-style pipe."""

from __future__ import annotations

from typing import Any, TypeVar

from conveyor.datapipes.base import Cursor, IterDataPipe, MapDataPipe, StateDict, check_version
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.rng import ShuffleSettings, SplitMix64, draw_seed

__all__ = ["Shuffler", "ShufflerIterDataPipe"]

T = TypeVar("T")


class Shuffler(IterDataPipe[T], ShuffleSettings):
    """Yields ``datapipe[i]`` for a shuffled list of indices (functional name: ``shuffle``).

    Same contract as torch's map-style Shuffler (an `IterDataPipe`): ``indices`` defaults
    to ``range(len(datapipe))`` (read at the first pull, not at construction);
    ``set_seed`` seeds the next pass only; without a seed each pass draws one from torch's
    global generator; ``set_shuffle(False)`` keeps index order. The permutation differs
    from torch's for the same seed. Its state is ``(seed, position)``: resuming recomputes
    the permutation and reads nothing twice.
    """

    def __init__(self, datapipe: MapDataPipe[T], *, indices: list[Any] | None = None) -> None:
        self.datapipe = datapipe
        self.indices = indices
        self._enabled = True
        self._seed: int | None = None

    def _indices(self) -> list[Any]:
        if self.indices is not None:
            return list(self.indices)
        return list(range(len(self.datapipe)))  # type: ignore[arg-type]

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        if state is not None:
            check_version(state, 1, "Shuffler")
            seed, position = state["seed"], int(state["position"])
        else:
            seed = None
            if self._enabled:
                seed = self._seed if self._seed is not None else draw_seed()
            self._seed, position = None, 0
        return _PermutationCursor(self.datapipe, self._indices(), seed, position)

    def __len__(self) -> int:
        if self.indices is not None:
            return len(self.indices)
        return len(self.datapipe)  # type: ignore[arg-type]


class _PermutationCursor(Cursor[T]):
    def __init__(
        self, datapipe: MapDataPipe[T], indices: list[Any], seed: int | None, position: int
    ) -> None:
        self._datapipe = datapipe
        self._seed = seed
        if seed is not None:
            order = SplitMix64(seed).permutation(len(indices))
            indices = [indices[j] for j in order]
        self._indices = indices
        self._position = position

    def next(self) -> T:
        if self._position >= len(self._indices):
            raise StopIteration
        value = self._datapipe.nonblocking_get(self._indices[self._position])
        self._position += 1
        return value

    def state(self) -> StateDict:
        return {"version": 1, "seed": self._seed, "position": self._position}


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
ShufflerIterDataPipe = Shuffler  # torch's map shuffle is iterable-style too
register_op("map.shuffle", Shuffler)
