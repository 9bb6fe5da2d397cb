"""Map-style ``map``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from conveyor.datapipes.base import MapDataPipe
from conveyor.datapipes.functional import register_op

__all__ = ["Mapper"]

U = TypeVar("U")


def _identity(data: Any) -> Any:
    return data


class Mapper(MapDataPipe[U]):
    """``fn(datapipe[index])`` at every index (functional name: ``map``).

    Same as torch's map-style Mapper (``fn`` defaults to the identity).
    """

    def __init__(self, datapipe: MapDataPipe[Any], fn: Callable[[Any], U] = _identity) -> None:
        self.datapipe = datapipe
        self.fn = fn

    def __getitem__(self, index: Any) -> U:
        return self.fn(self.datapipe[index])

    def __len__(self) -> int:
        return len(self.datapipe)  # type: ignore[arg-type]


register_op("map.map", Mapper)
