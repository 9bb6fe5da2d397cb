"""Pure functions that move nested structures holding tensors and arrays across processes.

`to_shared` pickles any object; every plain ``torch.Tensor`` and ``np.ndarray`` found
anywhere in it (dicts, lists, tuples, namedtuples, dataclasses, custom objects) is replaced
by a small descriptor ``(slab id, offset, dtype, shape, strides)``:

- data already in one of the batch's slabs (collate stacked it there) is referenced as is;
- larger data elsewhere is copied once into a slab;
- data up to ``inline_max_bytes`` (or when no slab can be had) is copied into the pickle.

`from_shared` rebuilds the object; tensors and arrays are zero-copy views of the slab
mappings. Tensor subclasses, sparse, quantized, conjugated and non-CPU tensors are left to
``ForkingPickler`` (torch's own sharing), exactly as before.
"""

from __future__ import annotations

import io
import math
import pickle
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch

from conveyor.transport.slab_pool import BatchArena

__all__ = ["from_shared", "to_shared"]

_NUMPY_NAMES = [
    *("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"),
    *("float16", "float32", "float64", "complex64", "complex128"),
]
_DTYPE_NAMES = [
    *_NUMPY_NAMES,
    *("bfloat16", "complex32", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz"),
    "float8_e5m2fnuz",
]
_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name) for name in _DTYPE_NAMES if hasattr(torch, name)
}
_CODES: dict[torch.dtype, str] = {dtype: name for name, dtype in _DTYPES.items()}


# Dtypes NumPy shares with torch (torch.from_numpy accepts them); the others are viewed
# through uint8 on the torch side.
_NUMPY: dict[str, np.dtype[Any] | None] = {name: None for name in _DTYPES}
_NUMPY.update({name: np.dtype(name) for name in _NUMPY_NAMES if name in _DTYPES})


def _extent(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Elements spanned by a non-empty strided view (torch and our arrays: strides >= 0)."""
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))


def _dense_stride(shape: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int, ...] | None:
    """``stride`` if it lays the elements out without gaps or overlaps (a permuted
    contiguous tensor), so a copy can keep it; else None (the copy is contiguous)."""
    expected = 1
    for step, size in sorted((s, n) for n, s in zip(shape, stride, strict=True) if n != 1):
        if step != expected:
            return None
        expected *= size
    return stride


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride = []
    running = 1
    for n in reversed(shape):
        stride.append(running)
        running *= max(n, 1)
    return tuple(reversed(stride))


_dispatch: tuple[dict[Any, Any], dict[Any, Any]] = ({}, {})  # (reducers seen, table made)


def _dispatch_table() -> dict[Any, Any]:
    """ForkingPickler's table (copyreg's plus torch's reducers), built again only when a
    reducer was registered since: ForkingPickler copies it for every pickler (~2 us a batch).
    """
    global _dispatch
    seen, table = _dispatch
    extra = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    if extra != seen:
        table = ForkingPickler._copyreg_dispatch_table.copy()  # type: ignore[attr-defined]
        table.update(extra)
        _dispatch = (dict(extra), table)
    return table


class _Encoder(ForkingPickler):
    """Pickler whose persistent ids stand for tensor and array data."""

    def __init__(self, file: io.BytesIO, arena: BatchArena | None, inline_max_bytes: int):
        pickle.Pickler.__init__(self, file, pickle.HIGHEST_PROTOCOL)
        self.dispatch_table = _dispatch_table()
        self._arena = arena
        self._inline_max = inline_max_bytes
        self._seen: dict[int, Any] = {}
        self.referenced: set[int] = set()

    def persistent_id(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is not torch.Tensor and kind is not np.ndarray and kind is not np.memmap:
            return None
        pid = self._seen.get(id(obj))
        if pid is None:
            pid = self._tensor(obj) if kind is torch.Tensor else self._array(obj)
            self._seen[id(obj)] = pid
        return pid

    def _tensor(self, t: torch.Tensor) -> Any:
        code = _CODES.get(t.dtype)
        if (
            code is None
            or t.device.type != "cpu"
            or t.is_nested  # strided layout, but no sizes: pickled whole
            or t.layout != torch.strided
            or t.is_conj()
            or t.is_neg()
            or (t.requires_grad and not t.is_leaf)
        ):
            return None
        shape = tuple(t.shape)
        requires_grad = t.requires_grad
        if t.numel() == 0:
            return ("e", code, shape, requires_grad)
        itemsize = t.element_size()
        stride = tuple(t.stride())
        located = self._locate(t.data_ptr(), _extent(shape, stride) * itemsize)
        if located is not None:
            slab_id, offset = located
            if stride == _contiguous_stride(shape):
                return ("s", slab_id, offset, code, shape, None, requires_grad)
            return ("s", slab_id, offset, code, shape, stride, requires_grad)
        nbytes = t.numel() * itemsize
        if nbytes <= self._inline_max and _NUMPY[code] is not None and t.is_contiguous():
            # Small and plain (S2's batches): its bytes into the pickle with the fewest calls.
            data = (t.detach() if requires_grad else t).numpy()
            return ("i", code, shape, pickle.PickleBuffer(data.data), requires_grad)
        # A copy keeps a dense layout (torch's workers keep every layout: they share storages)
        kept = None if t.is_contiguous() else _dense_stride(shape, stride)
        placed = self._arena.place(nbytes) if self._arena and self._big(nbytes) else None
        if placed is not None:
            slab, offset = placed
            target = slab.tensor[offset : offset + nbytes].view(t.dtype)
            target = target.view(shape) if kept is None else target.as_strided(shape, kept)
            target.copy_(t.detach())
            self.referenced.add(slab.id)
            return ("s", slab.id, offset, code, shape, kept, requires_grad)
        if kept is None:
            flat = t.detach().contiguous().reshape(-1)
        else:  # its elements in memory order: the view spans exactly numel elements
            flat = t.detach().as_strided((t.numel(),), (1,))
        raw = flat.view(torch.uint8).numpy()
        return ("i", code, shape, pickle.PickleBuffer(raw.data), requires_grad, kept)

    def _array(self, a: np.ndarray[Any, Any]) -> Any:
        if a.dtype.hasobject or a.size == 0 or min(a.strides, default=0) < 0:
            return None
        nbytes = a.nbytes
        if not self._big(nbytes):
            return None  # NumPy pickles small arrays well
        address = a.__array_interface__["data"][0]
        span = _extent(a.shape, a.strides) if a.ndim else a.itemsize
        located = self._locate(address, span + a.itemsize - 1 if a.ndim else span)
        if located is not None:
            slab_id, offset = located
            strides = None if a.flags.c_contiguous else a.strides
            return ("a", slab_id, offset, a.dtype.str, a.shape, strides)
        placed = self._arena.place(nbytes) if self._arena is not None else None
        if placed is None:
            return None
        slab, offset = placed
        target = slab.array[offset : offset + nbytes].view(a.dtype).reshape(a.shape)
        np.copyto(target, a, casting="no")
        self.referenced.add(slab.id)
        return ("a", slab.id, offset, a.dtype.str, a.shape, None)

    def _big(self, nbytes: int) -> bool:
        return self._arena is not None and nbytes > self._inline_max

    def _locate(self, address: int, nbytes: int) -> tuple[int, int] | None:
        if self._arena is None:
            return None
        located = self._arena.locate(address, nbytes)
        if located is not None:
            self.referenced.add(located[0])
        return located


def to_shared(obj: Any, arena: BatchArena | None, inline_max_bytes: int) -> tuple[bytes, set[int]]:
    """Pickle ``obj`` with its tensor and array data placed in ``arena``'s slabs.

    Args:
        obj: Anything picklable.
        arena: The batch's slabs; None pickles all data inline.
        inline_max_bytes: Data up to this size is pickled inline rather than put in a slab.

    Returns:
        The pickle, and the ids of the slabs it refers to. The caller must keep those
        slabs untouched until the receiver releases them.
    """
    buffer = io.BytesIO()
    encoder = _Encoder(buffer, arena, inline_max_bytes)
    encoder.dump(obj)
    return buffer.getvalue(), encoder.referenced


Resolver = Callable[[int], np.ndarray[Any, Any]]
"""``slab_id`` → a uint8 array over the whole slab; every view made from it keeps it alive."""


class _Decoder(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, resolve: Resolver):
        super().__init__(file)
        self._resolve = resolve
        self._dtypes: dict[str, np.dtype[Any]] = {}
        self.view_bytes = 0  # bytes of the slab views made (the data that crossed in shm)

    def persistent_load(self, pid: Any) -> Any:
        kind = pid[0]
        if kind == "s":
            _, slab_id, offset, code, shape, stride, requires_grad = pid
            view = _tensor_view(self._resolve(slab_id), offset, code, shape, stride, requires_grad)
            self.view_bytes += view.nbytes
            return view
        if kind == "a":
            _, slab_id, offset, dtype_str, shape, strides = pid
            dtype = self._dtypes.get(dtype_str)
            if dtype is None:
                dtype = self._dtypes[dtype_str] = np.dtype(dtype_str)
            array = _array_view(self._resolve(slab_id), offset, dtype, shape, strides)
            self.view_bytes += array.nbytes
            return array
        if kind == "i":
            _, code, shape, data, requires_grad, *layout = pid
            raw = np.frombuffer(data, dtype=np.uint8)
            stride = layout[0] if layout else None
            return _tensor_view(raw, 0, code, shape, stride, requires_grad)
        if kind == "e":
            _, code, shape, requires_grad = pid
            return torch.empty(shape, dtype=_DTYPES[code]).requires_grad_(requires_grad)
        raise pickle.UnpicklingError(f"unknown conveyor descriptor {kind!r}")


def _tensor_view(
    base: np.ndarray[Any, Any],
    offset: int,
    code: str,
    shape: tuple[int, ...],
    stride: tuple[int, ...] | None,
    requires_grad: bool,
) -> torch.Tensor:
    dtype = _DTYPES[code]
    itemsize = dtype.itemsize
    if stride is None:
        raw = base[offset : offset + math.prod(shape) * itemsize]
        np_dtype = _NUMPY[code]
        if np_dtype is not None:
            tensor = torch.from_numpy(raw.view(np_dtype).reshape(shape))
        else:
            tensor = torch.from_numpy(raw).view(dtype).view(shape)
    else:
        raw = base[offset : offset + _extent(shape, stride) * itemsize]
        tensor = torch.from_numpy(raw).view(dtype).as_strided(shape, stride)
    if requires_grad:
        tensor.requires_grad_()
    return tensor


def _array_view(
    base: np.ndarray[Any, Any],
    offset: int,
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    strides: tuple[int, ...] | None,
) -> np.ndarray[Any, Any]:
    if strides is None:
        return base[offset : offset + math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)
    raw = base[offset : offset + _extent(shape, strides) + dtype.itemsize - 1]
    return np.ndarray(shape, dtype=dtype, buffer=raw, strides=strides)


def from_shared(
    data: bytes | io.BytesIO, resolve: Resolver, tally: Callable[[int], None] | None = None
) -> Any:
    """Unpickle what `to_shared` made; descriptors become views of ``resolve(slab_id)``.

    ``data`` may be a stream positioned at the pickle (it is read up to the pickle's end).

    Views keep the resolved array alive: the receiver knows a slab is free again when that
    array is garbage (a ``weakref.finalize`` on it).
    """
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    decoder = _Decoder(stream, resolve)
    obj = decoder.load()
    if tally is not None:
        tally(decoder.view_bytes)
    return obj
