"""Batches through Ray's object store without a copy on the way out.

Ray stores NumPy arrays out of band (pickle protocol 5) and hands the reader an array that
views the object store; a torch tensor it would pickle through torch's own reducer, which
copies. `to_object_store` (in the actor) wraps every plain CPU tensor of a nested batch in
`StoreTensor`, whose pickled form is a byte array of the tensor's memory; unpickling it (in
the main process, inside ``ray.get``) calls `tensor_from_store`, which views that array as
a tensor again. Nothing walks the batch on the main process's side.

The object stays in the store while a tensor or array viewing it lives.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from conveyor.transport.structure import is_namedtuple, rebuild_mapping, rebuild_sequence

__all__ = ["StoreTensor", "tensor_from_store", "to_object_store"]


def tensor_from_store(array: np.ndarray[Any, Any], dtype: str, shape: tuple[int, ...]) -> Any:
    """The tensor whose bytes ``array`` holds (a view of the object store, no copy)."""
    with warnings.catch_warnings():
        # Ray's buffers are marked read-only; the tensor views them like a slab view does.
        warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
        flat = torch.from_numpy(array)
    return flat.view(getattr(torch, dtype)).reshape(shape)


class StoreTensor:
    """A CPU tensor on its way through the object store as a byte array."""

    __slots__ = ("array", "dtype", "shape")

    def __init__(self, tensor: torch.Tensor) -> None:
        dense = tensor.detach().contiguous()
        self.array = dense.reshape(-1).view(torch.uint8).numpy()
        self.dtype = str(dense.dtype).removeprefix("torch.")
        self.shape = tuple(dense.shape)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (tensor_from_store, (self.array, self.dtype, self.shape))


def _wrappable(tensor: torch.Tensor) -> bool:
    return (
        type(tensor) is torch.Tensor
        and tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.is_quantized
        and tensor.dtype.itemsize > 0
    )


def to_object_store(data: Any) -> tuple[Any, int]:
    """``data`` with its CPU tensors wrapped for a zero-copy crossing; its array bytes."""
    if isinstance(data, torch.Tensor):
        if not _wrappable(data):
            return data, 0
        return StoreTensor(data), data.numel() * data.element_size()
    if isinstance(data, np.ndarray):
        return data, int(data.nbytes)
    if isinstance(data, Mapping):
        return _mapping_to_store(data)
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        return _sequence_to_store(data)
    return data, 0


def _mapping_to_store(data: Mapping[Any, Any]) -> tuple[Any, int]:
    total = 0
    values = {}
    for key, value in data.items():
        values[key], size = to_object_store(value)
        total += size
    return (rebuild_mapping(data, values) if total else data), total


def _sequence_to_store(data: Sequence[Any]) -> tuple[Any, int]:
    pairs = [to_object_store(item) for item in data]
    total = sum(size for _, size in pairs)
    if not total:
        return data, 0
    items = [item for item, _ in pairs]
    if is_namedtuple(data):
        return type(data)(*items), total
    return rebuild_sequence(data, items), total
