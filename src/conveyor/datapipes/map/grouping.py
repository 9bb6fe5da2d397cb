"""Map-style ``batch``."""

from __future__ import annotations

from collections.abc import Sized
from typing import Any, TypeVar

from conveyor.datapipes.base import DataChunk, MapDataPipe
from conveyor.datapipes.functional import register_op

__all__ = ["Batcher", "BatcherMapDataPipe"]

T = TypeVar("T")


class Batcher(MapDataPipe[DataChunk[T]]):
    """Index ``i`` is the batch of items ``i*batch_size ...`` (functional name: ``batch``).

    Same as torch's map-style Batcher: the last batch is short unless ``drop_last``; past
    the end, `IndexError`.
    """

    def __init__(
        self,
        datapipe: MapDataPipe[T],
        batch_size: int,
        drop_last: bool = False,
        wrapper_class: type[DataChunk[Any]] | None = None,
    ) -> None:
        if batch_size <= 0:
            raise AssertionError("Batch size is required to be larger than 0!")
        self.datapipe = datapipe
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.wrapper_class = DataChunk if wrapper_class is None else wrapper_class

    def __getitem__(self, index: int) -> DataChunk[T]:
        batch: list[T] = []
        start = index * self.batch_size
        try:
            for i in range(start, start + self.batch_size):
                batch.append(self.datapipe[i])
        except IndexError as exc:
            if self.drop_last or not batch:
                raise IndexError(f"Index {index} is out of bound.") from exc
        return self.wrapper_class(batch)

    def __len__(self) -> int:
        if isinstance(self.datapipe, Sized):
            size = len(self.datapipe)
            if self.drop_last:
                return size // self.batch_size
            return (size + self.batch_size - 1) // self.batch_size
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


# torch's class name at torch's module path (``torch.utils.data.datapipes...``).
BatcherMapDataPipe = Batcher
register_op("map.batch", Batcher)
