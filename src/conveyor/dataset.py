"""Datasets: same names and semantics as ``torch.utils.data.dataset``.

TODO(helper A): ConcatDataset, ChainDataset, TensorDataset, StackDataset, Subset, random_split.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

T_co = TypeVar("T_co", covariant=True)

__all__ = [
    "Dataset",
    "IterableDataset",
]


class Dataset(Generic[T_co]):
    """A map from keys to samples. Same as `torch.utils.data.Dataset`.

    Subclasses implement ``__getitem__`` and usually ``__len__``; an optional
    ``__getitems__(indices) -> list`` lets the loader fetch a whole batch in one call.
    """

    def __getitem__(self, index: Any) -> T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset[T_co]) -> Dataset[T_co]:
        return ConcatDataset([self, other])  # type: ignore[name-defined]  # noqa: F821


class IterableDataset(Dataset[T_co], Iterable[T_co]):
    """A stream of samples. Same as `torch.utils.data.IterableDataset`.

    With ``num_workers > 0`` every worker iterates its own copy; use
    `conveyor.get_worker_info` in ``__iter__`` to split the work between them.
    """

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other: Dataset[T_co]) -> Dataset[T_co]:
        return ChainDataset([self, other])  # type: ignore[name-defined]  # noqa: F821
