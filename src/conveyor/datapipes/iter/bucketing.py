"""Batches shaped for variable-size items: ``bucketbatch`` and ``padded_batch``."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from conveyor.datapipes.base import (
    Cursor,
    DataChunk,
    IterDataPipe,
    SourceCursor,
    StateDict,
    as_iter_pipe,
)
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.iter.grouping import Batcher

if TYPE_CHECKING:
    import torch

__all__ = ["BucketBatcher", "PaddedBatcher", "pad_batch"]

T = TypeVar("T")


class BucketBatcher(IterDataPipe[DataChunk[T]]):
    """Batches of similar items (functional name: ``bucketbatch``).

    Reads buckets of ``batch_size * batch_num`` items, sorts each bucket by ``sort_key``
    (a key function on one item, e.g. ``len``; None keeps the order), and cuts it into
    batches, so items of similar size share a batch. Only the very last batch can be short
    (dropped with ``drop_last``). Differs from torchdata's BucketBatcher: ``sort_key`` is a
    per-item key (not a function of the whole bucket) and there is no built-in shuffle
    (add ``.shuffle()`` before and/or after).
    """

    def __init__(
        self,
        datapipe: IterDataPipe[T],
        batch_size: int,
        drop_last: bool = False,
        batch_num: int = 100,
        sort_key: Callable[[T], Any] | None = None,
    ) -> None:
        if batch_size <= 0:
            raise AssertionError("Batch size is required to be larger than 0!")
        if batch_num <= 0:
            raise AssertionError("batch_num is required to be larger than 0!")
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.batch_num = batch_num
        self.sort_key = sort_key

    def _cut(self, bucket: list[T], last: bool) -> list[DataChunk[T]]:
        if self.sort_key is not None:
            bucket = sorted(bucket, key=self.sort_key)
        size = self.batch_size
        batches = [DataChunk(bucket[i : i + size]) for i in range(0, len(bucket), size)]
        if last and self.drop_last and batches and len(batches[-1]) < size:
            batches.pop()
        return batches

    def _make_cursor(self, state: StateDict | None) -> Cursor[DataChunk[T]]:
        return _BucketCursor(self, state)


class _BucketCursor(SourceCursor[DataChunk[T]]):
    def __init__(self, node: BucketBatcher[T], state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "BucketBatcher")
        self._node = node
        self._bucket: list[T] = list(state["bucket"]) if state else []
        saved = state["out"] if state else ()
        self._out: deque[DataChunk[T]] = deque(DataChunk(b) for b in saved)
        self._done = bool(state["done"]) if state else False

    def next(self) -> DataChunk[T]:
        capacity = self._node.batch_size * self._node.batch_num
        while not self._out:
            if self._done:
                raise StopIteration
            try:
                self._bucket.append(self.source.nonblocking_next())
            except StopIteration:
                self._done = True
            if self._done or len(self._bucket) == capacity:
                bucket, self._bucket = self._bucket, []
                self._out.extend(self._node._cut(bucket, last=self._done))
        return self._out.popleft()

    def extra_state(self) -> StateDict:
        return {
            "bucket": list(self._bucket),
            "out": [list(b) for b in self._out],
            "done": self._done,
        }


def pad_batch(batch: Sequence[Any], padding_value: float = 0) -> torch.Tensor:
    """Stack items of different shapes into one tensor, padding each to the largest shape.

    Items are tensors, arrays, or (nested) number lists of the same rank; the result has
    shape ``(len(batch), *max_shape)`` and the items' promoted dtype, and every item sits
    at the start of its slot.
    """
    import torch

    tensors = [torch.as_tensor(item) for item in batch]
    if not tensors:
        raise ValueError("pad_batch: the batch is empty")
    ranks = {t.dim() for t in tensors}
    if len(ranks) != 1:
        raise ValueError(f"pad_batch: items must have the same number of dimensions, got {ranks}")
    shape = [max(sizes) for sizes in zip(*(t.shape for t in tensors), strict=True)]
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    out = torch.full((len(tensors), *shape), padding_value, dtype=dtype)
    for slot, t in zip(out, tensors, strict=True):
        slot[tuple(slice(0, n) for n in t.shape)] = t
    return out


class PaddedBatcher(IterDataPipe[Any]):
    """Batches stacked into one padded tensor (functional name: ``padded_batch``).

    ``batch`` followed by `pad_batch` on every batch; see both for the contract.
    """

    def __init__(
        self,
        datapipe: IterDataPipe[Any],
        batch_size: int,
        drop_last: bool = False,
        padding_value: float = 0,
    ) -> None:
        self.datapipe = Batcher(as_iter_pipe(datapipe, type(self).__name__), batch_size, drop_last)
        self.padding_value = padding_value

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return _PaddedCursor(self, state)

    def __len__(self) -> int:
        return len(self.datapipe)


class _PaddedCursor(SourceCursor[Any]):
    def __init__(self, node: PaddedBatcher, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "PaddedBatcher")
        self._value = node.padding_value

    def next(self) -> Any:
        return pad_batch(self.source.nonblocking_next(), self._value)


register_op("iter.bucketbatch", BucketBatcher)
register_op("iter.padded_batch", PaddedBatcher)
