"""Map-style ``concat`` and ``zip``."""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

from conveyor.datapipes.base import MapDataPipe
from conveyor.datapipes.functional import register_op

__all__ = ["Concater", "ConcaterMapDataPipe", "Zipper", "ZipperMapDataPipe"]


def _check(datapipes: tuple[Any, ...]) -> None:
    if len(datapipes) == 0:
        raise ValueError("Expected at least one DataPipe, but got nothing")
    if not all(isinstance(dp, MapDataPipe) for dp in datapipes):
        raise TypeError("Expected all inputs to be `MapDataPipe`")
    if not all(isinstance(dp, Sized) for dp in datapipes):
        raise TypeError("Expected all inputs to be `Sized`")


class Concater(MapDataPipe[Any]):
    """Indices run through the first input, then the next... (functional name: ``concat``).

    Same as torch's map-style Concater.
    """

    def __init__(self, *datapipes: MapDataPipe[Any]) -> None:
        _check(datapipes)
        self.datapipes = datapipes

    def __getitem__(self, index: int) -> Any:
        offset = 0
        for dp in self.datapipes:
            size = len(dp)  # type: ignore[arg-type]
            if index - offset < size:
                return dp[index - offset]
            offset += size
        raise IndexError(f"Index {index} is out of range.")

    def __len__(self) -> int:
        return sum(len(dp) for dp in self.datapipes)  # type: ignore[arg-type, misc]


class Zipper(MapDataPipe[tuple[Any, ...]]):
    """Index ``i`` is the tuple of every input's item ``i`` (functional name: ``zip``).

    Same as torch's map-style Zipper; its length is the shortest input's.
    """

    def __init__(self, *datapipes: MapDataPipe[Any]) -> None:
        _check(datapipes)
        self.datapipes = datapipes

    def __getitem__(self, index: Any) -> tuple[Any, ...]:
        row = []
        for dp in self.datapipes:
            try:
                row.append(dp[index])
            except IndexError as exc:
                raise IndexError(
                    f"Index {index} is out of range for one of the input MapDataPipes {dp}."
                ) from exc
        return tuple(row)

    def __len__(self) -> int:
        return min(len(dp) for dp in self.datapipes)  # type: ignore[arg-type]


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
ConcaterMapDataPipe = Concater
ZipperMapDataPipe = Zipper
register_op("map.concat", Concater)
register_op("map.zip", Zipper)
