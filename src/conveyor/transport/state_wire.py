"""A worker's stream state on its way to the main process: packed once, unpacked on demand.

Workers send their dataset's state with every batch (checked plain data, see
`conveyor.state.plain`), but the main process needs it only when the user takes a
checkpoint. So a worker packs it into bytes (C pickling, tensors as raw buffers: about
5 us for a shuffled `TarShards` state), the main process keeps the latest bytes per
worker without looking inside, and unpacks them only at ``state_dict()``. Packing is also
the copy that thread workers need (a dataset may change the dict it returned).

These bytes never leave conveyor's own processes and never enter a checkpoint: a
checkpoint holds the unpacked plain data, and nothing read from a checkpoint is ever
unpacked here.
"""

from __future__ import annotations

import copyreg
import io
import pickle
from typing import Any, NamedTuple

import torch

__all__ = ["PackedState", "pack_state", "unpack_state"]


class PackedState(NamedTuple):
    """A worker's plain-data state, packed by `pack_state` in that worker."""

    body: bytes


def _tensor_from(dtype: str, shape: tuple[int, ...], data: bytes) -> torch.Tensor:
    flat = torch.frombuffer(bytearray(data), dtype=getattr(torch, dtype)) if data else None
    if flat is None:
        return torch.empty(shape, dtype=getattr(torch, dtype))
    return flat.reshape(shape)


def _reduce_tensor(tensor: torch.Tensor) -> tuple[Any, ...]:
    dense = tensor.detach().cpu().contiguous()
    dtype = str(dense.dtype).removeprefix("torch.")
    if not dense.numel():
        return (_tensor_from, (dtype, tuple(dense.shape), b""))
    raw = dense.reshape(-1).view(torch.uint8).numpy()
    return (_tensor_from, (dtype, tuple(dense.shape), pickle.PickleBuffer(raw.data)))


_TABLE = copyreg.dispatch_table.copy()
_TABLE[torch.Tensor] = _reduce_tensor


def pack_state(state: Any) -> PackedState:
    """``state`` (plain data) as bytes: a deep copy, tensors included."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _TABLE
    pickler.dump(state)
    return PackedState(buffer.getvalue())


def unpack_state(packed: PackedState) -> Any:
    """The state `pack_state` packed (bytes a conveyor worker made, never a checkpoint's)."""
    return pickle.loads(packed.body)
