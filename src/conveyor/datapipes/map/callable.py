"""Map-style ``map``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from conveyor.datapipes.base import MapDataPipe
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.utils.common import _check_unpickable_fn

__all__ = ["Mapper", "MapperMapDataPipe"]

U = TypeVar("U")


def _identity(data: Any) -> Any:
    return data


class Mapper(MapDataPipe[U]):
    """``fn(datapipe[index])`` at every index (functional name: ``map``).

    Same as torch's map-style Mapper (``fn`` defaults to the identity).
    """

    def __init__(self, datapipe: MapDataPipe[Any], fn: Callable[[Any], U] = _identity) -> None:
        _check_unpickable_fn(fn)
        self.datapipe = datapipe
        self.fn = fn

    def __getitem__(self, index: Any) -> U:
        return self.fn(self.datapipe[index])

    def __len__(self) -> int:
        return len(self.datapipe)  # type: ignore[arg-type]


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
MapperMapDataPipe = Mapper
register_op("map.map", Mapper)
