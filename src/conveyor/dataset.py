"""Datasets: same names and semantics as ``torch.utils.data.dataset``.

Each class subclasses its torch counterpart (``isinstance(conveyor.Subset(...),
torch.utils.data.Subset)`` holds) and overrides every method torch defines. Composite
datasets accept members that are torch's own datasets too, so code can switch imports one
file at a time.
"""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from abc import ABCMeta
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Any, TypeVar, cast

import torch
from torch import Tensor

from conveyor.torch_compat import (
    TorchChainDataset,
    TorchConcatDataset,
    TorchDataset,
    TorchIterableDataset,
    TorchStackDataset,
    TorchSubset,
    TorchTensorDataset,
    is_iterable_style,
    recognises_torch_class,
)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "StackDataset",
    "ConcatDataset",
    "ChainDataset",
    "Subset",
    "random_split",
]


class Dataset(TorchDataset[T_co], metaclass=ABCMeta):
    """A map from keys to samples. Same as `torch.utils.data.Dataset`.

    Subclasses implement ``__getitem__`` and usually ``__len__``; an optional
    ``__getitems__(indices) -> list`` lets the loader fetch a whole batch in one call.
    Every torch dataset is an instance of this class too (``isinstance``), as of torch's.
    """

    @classmethod
    def __subclasshook__(cls, subclass: type) -> Any:
        return recognises_torch_class(cls, Dataset, TorchDataset, subclass)

    def __getitem__(self, index: Any) -> T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: TorchDataset[T_co]) -> ConcatDataset[T_co]:
        return ConcatDataset([self, other])  # type: ignore[list-item]  # torch's datasets too


class IterableDataset(Dataset[T_co], TorchIterableDataset[T_co]):
    """A stream of samples. Same as `torch.utils.data.IterableDataset`.

    With ``num_workers > 0`` every worker iterates its own copy; use
    `conveyor.get_worker_info` in ``__iter__`` to split the work between them. Every torch
    IterableDataset (a Hugging Face stream, ...) is an instance of this class too.
    """

    @classmethod
    def __subclasshook__(cls, subclass: type) -> Any:
        return recognises_torch_class(cls, IterableDataset, TorchIterableDataset, subclass)

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other: TorchDataset[T_co]) -> ChainDataset[T_co]:  # type: ignore[override]
        return ChainDataset([self, other])  # type: ignore[list-item]  # torch's datasets too


def _len(dataset: object) -> int:
    """``len()`` of a dataset typed without ``__len__`` (torch's base class has none)."""
    return len(cast(Sized, dataset))


def _fetch_many(dataset: object, indices: list[Any]) -> list[Any]:
    """Fetch ``indices`` through ``__getitems__`` when the dataset has it, else one by one."""
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        return cast(list[Any], getitems(indices))
    getitem = cast(Dataset[Any], dataset).__getitem__
    return [getitem(index) for index in indices]


class TensorDataset(Dataset[tuple[Tensor, ...]], TorchTensorDataset):
    """Samples are rows of tensors. Same as `torch.utils.data.TensorDataset`.

    Difference: calling it with no tensors raises `ValueError` (torch: `IndexError`).

    Args:
        *tensors: tensors with the same first dimension; sample ``i`` is the tuple of their
            rows ``i``.
    """

    tensors: tuple[Tensor, ...]

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        rows = tensors[0].size(0)
        if any(tensor.size(0) != rows for tensor in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(tensor[index] for tensor in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].size(0)


class StackDataset(Dataset[Any], TorchStackDataset[Any]):
    """Zips datasets of equal length. Same as `torch.utils.data.StackDataset`.

    ``StackDataset(a, b)[i] == (a[i], b[i])`` and ``StackDataset(x=a, y=b)[i] ==
    {"x": a[i], "y": b[i]}``. ``__getitems__`` uses each member's own ``__getitems__``.

    Args:
        *args: datasets whose samples form tuples.
        **kwargs: named datasets whose samples form dicts (not with ``args``).
    """

    datasets: tuple[Any, ...] | dict[str, Any]

    def __init__(self, *args: Dataset[Any], **kwargs: Dataset[Any]) -> None:
        if args and kwargs:
            raise ValueError(
                "Supported either ``tuple``- (via ``args``) or ``dict``- (via ``kwargs``) "
                "like input/output, but both types are given."
            )
        members: list[Any] = list(args) if args else list(kwargs.values())
        if not members:
            raise ValueError("At least one dataset should be passed")
        self._length = _len(members[0])
        if any(_len(member) != self._length for member in members):
            raise ValueError("Size mismatch between datasets")
        self.datasets = args if args else kwargs

    def __getitem__(self, index: Any) -> Any:
        if isinstance(self.datasets, dict):
            return {key: member[index] for key, member in self.datasets.items()}
        return tuple(member[index] for member in self.datasets)

    def __getitems__(self, indices: list[Any]) -> list[Any]:
        named = isinstance(self.datasets, dict)
        members = self.datasets.values() if isinstance(self.datasets, dict) else self.datasets
        columns = []
        for member in members:
            column = _fetch_many(member, indices)
            if len(column) != len(indices):
                raise ValueError(
                    "Nested dataset's output size mismatch."
                    f" Expected {len(indices)}, got {len(column)}"
                )
            columns.append(column)
        rows = zip(*columns, strict=True)
        if named:
            keys = list(self.datasets)
            return [dict(zip(keys, row, strict=True)) for row in rows]
        return list(rows)

    def __len__(self) -> int:
        return self._length


class ConcatDataset(Dataset[T_co], TorchConcatDataset[T_co]):
    """Datasets one after another. Same as `torch.utils.data.ConcatDataset`.

    Difference: an index past the end raises `IndexError` with a message naming the length.

    Args:
        datasets: the datasets to concatenate, in order (map-style, conveyor's or torch's;
            an iterable-style one raises).
    """

    datasets: list[TorchDataset[T_co]]
    cumulative_sizes: list[int]

    @staticmethod
    def cumsum(sequence: Iterable[object]) -> list[int]:
        """Running totals of the members' lengths (the end offset of each member)."""
        return list(itertools.accumulate(_len(member) for member in sequence))

    def __init__(self, datasets: Iterable[Dataset[T_co]]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for member in self.datasets:
            if is_iterable_style(member):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> T_co:
        length = self.cumulative_sizes[-1]
        if idx < 0:
            if -idx > length:
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += length
        elif idx >= length:
            raise IndexError(f"index {idx} is out of range for ConcatDataset of length {length}")
        # bisect_right skips empty members: their end offset equals the previous one.
        member = bisect.bisect_right(self.cumulative_sizes, idx)
        offset = self.cumulative_sizes[member - 1] if member else 0
        return self.datasets[member][idx - offset]

    @property
    def cummulative_sizes(self) -> list[int]:
        """Deprecated misspelling of `cumulative_sizes`, kept for old code."""
        warnings.warn(
            "`cummulative_sizes` attribute is renamed to `cumulative_sizes`",
            FutureWarning,
            stacklevel=2,
        )
        return self.cumulative_sizes


class ChainDataset(IterableDataset[T_co], TorchChainDataset):
    """Iterable datasets one after another. Same as `torch.utils.data.ChainDataset`.

    Members are checked lazily, as in torch: a map-style member raises `AssertionError`
    when iteration or ``len()`` reaches it.

    Args:
        datasets: the iterable-style datasets to read, in order (conveyor's or torch's).
    """

    def __init__(self, datasets: Iterable[Dataset[T_co]]) -> None:
        self.datasets: Iterable[TorchDataset[T_co]] = datasets

    def __iter__(self) -> Iterator[T_co]:
        for member in self.datasets:
            yield from _iterable_member(member)

    def __len__(self) -> int:
        return sum(_len(_iterable_member(member)) for member in self.datasets)


def _iterable_member(member: TorchDataset[T]) -> Iterable[T]:
    if not is_iterable_style(member):
        raise AssertionError("ChainDataset only supports IterableDataset")
    return cast(Iterable[T], member)


class Subset(Dataset[T_co], TorchSubset[T_co]):
    """The samples of ``dataset`` at ``indices``. Same as `torch.utils.data.Subset`.

    ``__getitems__`` forwards the mapped indices to ``dataset.__getitems__`` when present.
    Difference: a subclass that overrides only ``__getitem__`` works (its ``__getitem__``
    is used for batches too) where torch raises `NotImplementedError`.

    Args:
        dataset: the whole dataset.
        indices: the positions of ``dataset`` this subset holds, in its order.
    """

    dataset: Dataset[T_co]
    indices: Sequence[int]

    def __init__(self, dataset: Dataset[T_co], indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: Any) -> T_co:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list[int]) -> list[T_co]:
        if type(self).__getitem__ is not Subset.__getitem__:
            return [self[idx] for idx in indices]
        return _fetch_many(self.dataset, [self.indices[idx] for idx in indices])

    def __len__(self) -> int:
        return len(self.indices)


def _fraction_lengths(fractions: Sequence[float], total: int) -> list[int]:
    """Floor each share, then hand out the remainder one by one from the first split."""
    lengths = []
    for i, fraction in enumerate(fractions):
        if fraction < 0 or fraction > 1:
            raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        lengths.append(math.floor(total * fraction))
    for i in range(total - sum(lengths)):
        lengths[i % len(lengths)] += 1
    for i, length in enumerate(lengths):
        if length == 0:
            warnings.warn(
                f"Length of split at index {i} is 0. This might result in an empty dataset.",
                stacklevel=3,
            )
    return lengths


def random_split(
    dataset: Dataset[T],
    lengths: Sequence[int | float],
    generator: torch.Generator | None = torch.default_generator,
) -> list[Subset[T]]:
    """Split into non-overlapping random subsets. Same as `torch.utils.data.random_split`.

    ``lengths`` are sizes, or fractions summing to 1. The permutation is
    ``torch.randperm(len(dataset), generator=generator)``, so a seeded generator gives the
    same splits as torch.

    Args:
        dataset: the dataset to split.
        lengths: the subsets' sizes, or fractions of ``len(dataset)`` summing to 1.
        generator: the `torch.Generator` of the permutation (default: the global one).
    """
    total = _len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = _fraction_lengths(lengths, total)
    else:
        sizes = cast(list[int], list(lengths))
    if sum(sizes) != total:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order: list[int] = torch.randperm(sum(sizes), generator=generator).tolist()
    ends = itertools.accumulate(sizes)
    return [Subset(dataset, order[end - size : end]) for end, size in zip(ends, sizes, strict=True)]
