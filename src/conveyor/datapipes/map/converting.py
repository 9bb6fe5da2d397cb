"""Map-style to iterable-style: ``to_iter``."""

from __future__ import annotations

from typing import Any, TypeVar

from conveyor.datapipes.base import Cursor, IterDataPipe, MapDataPipe, StateDict, check_version
from conveyor.datapipes.functional import register_op

__all__ = ["MapToIterConverter"]

T = TypeVar("T")


class MapToIterConverter(IterDataPipe[T]):
    """Yields ``datapipe[i]`` for ``i`` in ``indices`` (functional name: ``to_iter``).

    Same as torchdata's MapToIterConverter: ``indices`` defaults to
    ``range(len(datapipe))``, read at the first pull. Resumes by index.
    """

    def __init__(self, datapipe: MapDataPipe[T], indices: list[Any] | None = None) -> None:
        if not isinstance(datapipe, MapDataPipe):
            raise TypeError(
                f"MapToIterConverter expects a MapDataPipe, got {type(datapipe).__name__}"
            )
        self.datapipe = datapipe
        self.indices = indices

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        if state is not None:
            check_version(state, 1, "MapToIterConverter")
        return _IndexCursor(self, int(state["position"]) if state else 0)

    def __len__(self) -> int:
        if self.indices is not None:
            return len(self.indices)
        return len(self.datapipe)  # type: ignore[arg-type]


class _IndexCursor(Cursor[T]):
    def __init__(self, node: MapToIterConverter[T], position: int) -> None:
        self._datapipe = node.datapipe
        self._indices: list[Any] | range = (
            list(node.indices) if node.indices is not None else range(len(node))
        )
        self._position = position

    def next(self) -> T:
        if self._position >= len(self._indices):
            raise StopIteration
        value = self._datapipe.nonblocking_get(self._indices[self._position])
        self._position += 1
        return value

    def state(self) -> StateDict:
        return {"version": 1, "position": self._position}


register_op("map.to_iter", MapToIterConverter)
