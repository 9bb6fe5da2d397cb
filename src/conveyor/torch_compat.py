"""The one module that imports ``torch.utils.data``: torch's base classes and globals.

conveyor's public classes subclass the torch classes named here, so that every
``isinstance`` check in frameworks and user code holds both ways (a conveyor dataset *is* a
``torch.utils.data.Dataset``, torch's DataLoader accepts conveyor samplers). They override
every method torch defines, so no ``torch.utils.data`` code runs when conveyor builds a
loader or loads data; ``tests/unit/test_torch_identity.py`` checks both with a trace hook.

The DataPipe bases are deliberately *not* torch's: torch's ``IterDataPipe`` and
``MapDataPipe`` carry a metaclass that wraps ``__iter__`` and hooks ``__getattr__``, which
would run torch's machinery on every pull (see the README's differences). torch's DataPipe
classes are named here only to recognise a user's torch DataPipe graph, which conveyor's
loader then seeds, shuffles and shards itself (``conveyor.datapipes.graph``).

Apart from the classes, this module reads two torch globals and writes two: the collate
registry users extend (``torch.utils.data._utils.collate.default_collate_fn_map``), the
worker info torch-style code reads with ``torch.utils.data.get_worker_info()``, and - once a
thread worker starts - that function itself, so that code calling it (Hugging Face
``datasets`` splits shards with it) sees each thread worker's own info.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch.utils.data as _torch_data
import torch.utils.data._utils.collate as _torch_collate
import torch.utils.data._utils.worker as _torch_worker
from torch.utils.data import BatchSampler as TorchBatchSampler
from torch.utils.data import ChainDataset as TorchChainDataset
from torch.utils.data import ConcatDataset as TorchConcatDataset
from torch.utils.data import Dataset as TorchDataset
from torch.utils.data import IterableDataset as TorchIterableDataset
from torch.utils.data import RandomSampler as TorchRandomSampler
from torch.utils.data import Sampler as TorchSampler
from torch.utils.data import SequentialSampler as TorchSequentialSampler
from torch.utils.data import StackDataset as TorchStackDataset
from torch.utils.data import Subset as TorchSubset
from torch.utils.data import SubsetRandomSampler as TorchSubsetRandomSampler
from torch.utils.data import TensorDataset as TorchTensorDataset
from torch.utils.data import WeightedRandomSampler as TorchWeightedRandomSampler
from torch.utils.data.datapipes.datapipe import DataChunk as TorchDataChunk
from torch.utils.data.datapipes.datapipe import IterDataPipe as TorchIterDataPipe
from torch.utils.data.datapipes.datapipe import MapDataPipe as TorchMapDataPipe
from torch.utils.data.distributed import DistributedSampler as TorchDistributedSampler

__all__ = [
    "DatasetKind",
    "TorchBatchSampler",
    "TorchChainDataset",
    "TorchConcatDataset",
    "TorchDataChunk",
    "TorchDataLoader",
    "TorchDataset",
    "TorchDistributedSampler",
    "TorchIterDataPipe",
    "TorchIterableDataset",
    "TorchLoaderIter",
    "TorchMapDataPipe",
    "TorchMultiProcessingLoaderIter",
    "TorchRandomSampler",
    "TorchSampler",
    "TorchSequentialSampler",
    "TorchSingleProcessLoaderIter",
    "TorchStackDataset",
    "TorchSubset",
    "TorchSubsetRandomSampler",
    "TorchTensorDataset",
    "TorchWeightedRandomSampler",
    "is_iterable_style",
    "is_torch_datapipe",
    "publish_worker_info",
    "recognises_torch_class",
    "route_thread_worker_info",
    "torch_worker_info",
    "user_collate_fns",
]

_TORCH_MODULE_PREFIX = "torch.utils.data"
T_co = TypeVar("T_co", covariant=True)

if TYPE_CHECKING:

    class TorchDataLoader(Generic[T_co]):
        """What type checkers see of torch's DataLoader: identity only. conveyor's loader
        returns its own iterator types, which torch's annotations would reject."""

    class TorchLoaderIter:
        """What type checkers see of torch's ``_BaseDataLoaderIter``: identity only."""

    class TorchSingleProcessLoaderIter(TorchLoaderIter):
        """torch's ``_SingleProcessDataLoaderIter``, for type checkers."""

    class TorchMultiProcessingLoaderIter(TorchLoaderIter):
        """torch's ``_MultiProcessingDataLoaderIter``, for type checkers."""

else:
    # conveyor's iterators subclass torch's (every method overridden) so that code which
    # recognises a loader's iterator by torch's classes (Lightning drops it from pickles,
    # PyG shuts its workers down) treats conveyor's the same way.
    from torch.utils.data import DataLoader as TorchDataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter as TorchLoaderIter
    from torch.utils.data.dataloader import (
        _MultiProcessingDataLoaderIter as TorchMultiProcessingLoaderIter,
    )
    from torch.utils.data.dataloader import (
        _SingleProcessDataLoaderIter as TorchSingleProcessLoaderIter,
    )


class DatasetKind:
    """The values of torch's ``DataLoader._dataset_kind`` (``_DatasetKind.Map/Iterable``)."""

    Map = 0
    Iterable = 1


def is_iterable_style(dataset: object) -> bool:
    """True for iterable-style datasets: conveyor's and torch's (DataPipes included)."""
    return isinstance(dataset, TorchIterableDataset)


def is_torch_datapipe(obj: object) -> bool:
    """True for a DataPipe of torch's (or torchdata's, which subclass torch's)."""
    return isinstance(obj, TorchIterDataPipe | TorchMapDataPipe)


def recognises_torch_class(cls: type, base: type, torch_base: type, subclass: type) -> Any:
    """``__subclasshook__`` of conveyor's public bases (Dataset, IterableDataset, Sampler).

    ``isinstance(x, conveyor.IterableDataset)`` holds for torch's iterable datasets too (a
    Hugging Face stream is one), as it does with torch's class: code that switched its
    import keeps taking the same branch. Only the base itself answers, not its subclasses:
    a torch dataset is no ``conveyor.TensorDataset``. The MRO is read, not ``issubclass``:
    torch's IterableDataset is an ABC too, whose check would ask this hook again.
    """
    if cls is base and torch_base in getattr(subclass, "__mro__", ()):
        return True
    return NotImplemented


def torch_worker_info() -> Any:
    """What ``torch.utils.data.get_worker_info()`` returns here (a worker of torch's loader)."""
    return _torch_worker._worker_info


def publish_worker_info(info: object | None) -> None:
    """Make ``torch.utils.data.get_worker_info()`` return ``info`` in this worker too."""
    _torch_worker._worker_info = info  # type: ignore[assignment]


def route_thread_worker_info(thread_info: Callable[[], object | None]) -> None:
    """Make ``torch.utils.data.get_worker_info()`` answer ``thread_info()`` in thread workers.

    torch keeps the worker info in one module global, which cannot tell threads apart, so
    the function is replaced (in ``torch.utils.data`` and its ``_utils.worker`` module, where
    callers look it up) by one that asks ``thread_info`` first and otherwise returns torch's
    global exactly as before. Code that bound the function by name before the first thread
    worker started keeps torch's original and sees ``None`` in thread workers.
    """
    current = _torch_data.get_worker_info
    if getattr(current, "_conveyor_routes_threads", False):
        return

    def get_worker_info() -> Any:
        info = thread_info()
        return info if info is not None else _torch_worker._worker_info

    get_worker_info.__doc__ = current.__doc__
    get_worker_info._conveyor_routes_threads = True  # type: ignore[attr-defined]
    _torch_data.get_worker_info = get_worker_info
    _torch_worker.get_worker_info = get_worker_info


_seen_registry: dict[Any, Callable[..., Any]] = {}
_seen_user_fns: dict[Any, Callable[..., Any]] = {}


def user_collate_fns() -> Mapping[Any, Callable[..., Any]]:
    """Entries users put in torch's ``default_collate_fn_map``: new types, or torch's types
    given another function. torch's own functions are left out (conveyor has its own).

    Reads torch's dict on every call (it may change at any time): an unchanged dict costs
    one dict comparison (~0.25 us), a changed one a scan.
    """
    global _seen_registry, _seen_user_fns
    current = _torch_collate.default_collate_fn_map
    if current != _seen_registry:
        _seen_user_fns = {
            key: fn
            for key, fn in current.items()
            if not str(getattr(fn, "__module__", "")).startswith(_TORCH_MODULE_PREFIX)
        }
        _seen_registry = dict(current)
    return _seen_user_fns
