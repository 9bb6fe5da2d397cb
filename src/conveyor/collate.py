"""Collation: merging a list of samples into one batch.

Same as ``torch.utils.data._utils.collate`` (exported by torch as ``default_collate``,
``default_convert`` and ``collate``), with identical results, dtypes and container types.
Differences:

- Tensors are stacked by :func:`stack_into`, which can write straight into a buffer handed
  out by an *output allocator* (:func:`set_output_allocator`). conveyor's workers install one
  that returns views of reusable shared-memory slabs, so a batch crosses to the main process
  without a further copy. torch does the same only inside its own workers, with a fresh
  shared-memory segment per batch.
- Batches of plain Python ints, bools and floats are converted through NumPy, about 3x
  faster than ``torch.tensor(list)``; anything NumPy could type differently from torch takes
  torch's path. Such a tensor's storage is owned by NumPy, so it cannot grow by ``resize_()``.
- Each nested field is collated once. torch collates a field twice when rebuilding a custom
  container raises ``TypeError``; the result and the exceptions are the same.

Extension: types registered in conveyor's `default_collate_fn_map` *or* in torch's
(``torch.utils.data._utils.collate.default_collate_fn_map``, where torch's documentation
tells users to register them) are honoured by `default_collate`; torch's own entries are
not called, conveyor's take their place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from conveyor.torch_compat import user_collate_fns
from conveyor.transport.structure import is_namedtuple, rebuild_mapping, rebuild_sequence

__all__ = [
    "CollateFnMap",
    "OutputAllocator",
    "collate",
    "collate_float_fn",
    "collate_int_fn",
    "collate_numpy_array_fn",
    "collate_numpy_scalar_fn",
    "collate_str_fn",
    "collate_tensor_fn",
    "default_collate",
    "default_collate_fn_map",
    "default_convert",
    "get_output_allocator",
    "set_output_allocator",
    "stack_into",
]

CollateFnMap = Mapping[Any, Callable[..., Any]]
"""Element type (or tuple of types) → ``fn(batch, *, collate_fn_map)``, as in torch.

Keys are typed ``Any`` so that a user's ``{MyType: fn}`` type-checks (dict keys are invariant).
"""

OutputAllocator = Callable[[int, torch.dtype], torch.Tensor | None]
"""``fn(numel, dtype)`` → a contiguous 1-D CPU tensor of at least ``numel`` elements, or None."""

# torch refuses arrays whose dtype string names bytes, unicode or object data; matching the
# string (not ``dtype.kind``) keeps its exact verdict, e.g. on ``datetime64[as]``.
_STRING_OR_OBJECT_DTYPE = re.compile(r"[SaUO]")
_UNSUPPORTED_FORMAT = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)
_SPARSE_LAYOUTS = frozenset(
    {torch.sparse_coo, torch.sparse_csr, torch.sparse_bsr, torch.sparse_csc, torch.sparse_bsc}
)
_NUMPY_STRING_SCALARS = ("str_", "string_")

_output_allocator: OutputAllocator | None = None


def set_output_allocator(allocator: OutputAllocator | None) -> OutputAllocator | None:
    """Route every later tensor stack in this process into buffers from ``allocator``.

    Process-wide: a worker process installs it once before its first batch; thread workers
    must not, because they share the main process's hook. ``allocator`` may return None to
    decline a request (the stack then allocates normally). None uninstalls the hook.

    Returns:
        The allocator that was installed before, so a caller can restore it.
    """
    global _output_allocator
    previous = _output_allocator
    _output_allocator = allocator
    return previous


def get_output_allocator() -> OutputAllocator | None:
    """The allocator installed by :func:`set_output_allocator`, if any."""
    return _output_allocator


def stack_into(tensors: Sequence[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.stack(tensors, 0, out=out)``, taking ``out`` from the output allocator if unset.

    The allocator is asked only when its buffer gives the same result as a plain stack: CPU
    tensors of one dtype, none requiring grad, and a non-empty result.
    """
    if out is None and _output_allocator is not None:
        out = _allocated_output(tensors, _output_allocator)
    if not isinstance(tensors, list | tuple):
        tensors = tuple(tensors)
    return torch.stack(tensors, 0, out=out)


def _allocated_output(
    tensors: Sequence[torch.Tensor], allocator: OutputAllocator
) -> torch.Tensor | None:
    first = tensors[0]
    dtype = first.dtype
    if first.device.type != "cpu":
        return None
    for tensor in tensors:
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != dtype or tensor.requires_grad:
            return None  # a plain stack gives the answer, or torch's own error for a non-tensor
    numel = first.numel() * len(tensors)
    if numel == 0:
        return None
    buffer = allocator(numel, dtype)
    if buffer is None:
        return None
    if buffer.dtype != dtype or buffer.dim() != 1 or buffer.numel() < numel:
        raise ValueError(
            f"output allocator returned a {tuple(buffer.shape)} {buffer.dtype} tensor; "
            f"it must return a 1-D {dtype} tensor of at least {numel} elements"
        )
    return buffer[:numel].view(len(tensors), *first.shape)


def default_convert(data: Any) -> Any:
    """Same as ``torch.utils.data.default_convert``: NumPy arrays and scalars become tensors.

    Containers are rebuilt with the same type where torch does so (plain tuples become lists).

    Args:
        data: one sample (or structure of them) to convert.
    """
    data_type = type(data)
    if isinstance(data, torch.Tensor):
        return data
    if data_type.__module__ == "numpy" and data_type.__name__ not in _NUMPY_STRING_SCALARS:
        if data_type is np.ndarray and _STRING_OR_OBJECT_DTYPE.search(data.dtype.str):
            return data
        return torch.as_tensor(data)
    if isinstance(data, Mapping | Sequence) and not isinstance(data, str | bytes):
        return _convert_container(data)
    return data


def _convert_container(data: Mapping[Any, Any] | Sequence[Any]) -> Any:
    if isinstance(data, Mapping):
        values = {key: default_convert(data[key]) for key in data}
        return values if type(data) is dict else rebuild_mapping(data, values)
    if is_namedtuple(data):
        return type(data)(*(default_convert(item) for item in data))
    items = [default_convert(item) for item in data]
    if type(data) is list or isinstance(data, tuple):
        return items  # torch turns tuples into lists, for backwards compatibility
    return rebuild_sequence(data, items)


def _lookup(elem: object, collate_fn_map: CollateFnMap) -> Callable[..., Any] | None:
    """The collate function for ``elem``: exact type first, then keys in insertion order."""
    fn = collate_fn_map.get(type(elem))
    if fn is not None:
        return fn
    for key, candidate in collate_fn_map.items():
        if isinstance(elem, key):
            return candidate
    return None


def collate(batch: Sequence[Any], *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """Same as ``torch.utils.data.collate``: dispatch on ``batch[0]``'s type, recurse into
    containers.

    ``collate_fn_map`` is consulted first: the element's exact type, then each key in
    insertion order with ``isinstance`` (so subclasses and tuple keys match, as in torch).
    """
    elem = batch[0]
    if collate_fn_map is not None:
        fn = _lookup(elem, collate_fn_map)
        if fn is not None:
            return fn(batch, collate_fn_map=collate_fn_map)
    elem_type = type(elem)
    if isinstance(elem, Mapping):
        values = {
            key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem
        }
        return values if elem_type is dict else rebuild_mapping(elem, values)
    if is_namedtuple(elem):
        fields = zip(*batch, strict=False)
        return elem_type(*(collate(field, collate_fn_map=collate_fn_map) for field in fields))
    if isinstance(elem, Sequence):
        return _collate_sequence(batch, elem, collate_fn_map)
    raise TypeError(_UNSUPPORTED_FORMAT.format(elem_type))


def _collate_sequence(
    batch: Sequence[Any], elem: Sequence[Any], collate_fn_map: CollateFnMap | None
) -> Any:
    size = len(elem)
    if any(len(sample) != size for sample in batch):
        raise RuntimeError("each element in list of batch should be of equal size")
    # Fields stay tuples: a field of strings comes back as that tuple, exactly as in torch.
    fields = zip(*batch, strict=False)
    values = [collate(field, collate_fn_map=collate_fn_map) for field in fields]
    if type(elem) is list or isinstance(elem, tuple):
        return values  # torch returns tuples as lists, for backwards compatibility.
    return rebuild_sequence(elem, values)


def collate_tensor_fn(
    batch: Sequence[torch.Tensor], *, collate_fn_map: CollateFnMap | None = None
) -> torch.Tensor:
    """Same as torch's: stack along a new first dimension (through :func:`stack_into`)."""
    elem = batch[0]
    if elem.is_nested:
        raise RuntimeError(
            "Batches of nested tensors are not currently supported by the default collate_fn; "
            "please provide a custom collate_fn to handle them appropriately."
        )
    if elem.layout in _SPARSE_LAYOUTS:
        raise RuntimeError(
            "Batches of sparse tensors are not currently supported by the default collate_fn; "
            "please provide a custom collate_fn to handle them appropriately."
        )
    return stack_into(batch)


def collate_numpy_array_fn(
    batch: Sequence[np.ndarray[Any, Any]], *, collate_fn_map: CollateFnMap | None = None
) -> Any:
    """Same as torch's: arrays become tensors, collated again through ``collate_fn_map``."""
    dtype = batch[0].dtype
    if _STRING_OR_OBJECT_DTYPE.search(dtype.str) is not None:
        raise TypeError(_UNSUPPORTED_FORMAT.format(dtype))
    return collate([torch.as_tensor(array) for array in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(
    batch: Sequence[np.generic], *, collate_fn_map: CollateFnMap | None = None
) -> torch.Tensor:
    """Same as torch's: ``torch.as_tensor(batch)``."""
    return torch.as_tensor(batch)


def _numbers_via_numpy(
    batch: Sequence[Any], types: frozenset[type], dtypes: tuple[np.dtype[Any], ...]
) -> torch.Tensor | None:
    """``torch.from_numpy(np.array(batch))`` when that surely equals torch's result, else None.

    Only batches of plain ``types`` that NumPy turns into a flat array of one of ``dtypes`` are
    trusted; NumPy and torch disagree elsewhere (torch rejects ``[0, np.bool_(False)]``), and
    huge ints, ``None``, strings or lists must reach torch to raise its own errors.
    """
    if not types.issuperset(map(type, batch)):
        return None
    try:
        array = np.array(batch)
    except (TypeError, ValueError, OverflowError):
        return None
    if array.ndim != 1 or array.dtype not in dtypes:
        return None
    return torch.from_numpy(array)


_INT_TYPES = frozenset({int, bool})
_INT_DTYPES = (np.dtype(np.int64), np.dtype(np.bool_))
_FLOAT_TYPES = frozenset({float, int, bool})
_FLOAT_DTYPES = (np.dtype(np.float64),)


def collate_float_fn(
    batch: Sequence[float], *, collate_fn_map: CollateFnMap | None = None
) -> torch.Tensor:
    """Same as torch's: a float64 tensor."""
    result = _numbers_via_numpy(batch, _FLOAT_TYPES, _FLOAT_DTYPES)
    return result if result is not None else torch.tensor(batch, dtype=torch.float64)


def collate_int_fn(
    batch: Sequence[int], *, collate_fn_map: CollateFnMap | None = None
) -> torch.Tensor:
    """Same as torch's: ``torch.tensor(batch)`` (int64, or bool for a batch of bools)."""
    result = _numbers_via_numpy(batch, _INT_TYPES, _INT_DTYPES)
    return result if result is not None else torch.tensor(batch)


def collate_str_fn(batch: Sequence[Any], *, collate_fn_map: CollateFnMap | None = None) -> Any:
    """Same as torch's: strings and bytes are returned as the batch itself."""
    return batch


default_collate_fn_map: dict[type | tuple[type, ...], Callable[..., Any]] = {
    torch.Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,  # also np.memmap, a subclass
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,  # NumPy strings are skipped
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}
"""The registry :func:`default_collate` uses, with torch's keys in torch's order.

Extend it in place, or copy it (``dict(default_collate_fn_map)``) and pass the copy to
:func:`collate`. Insertion order matters for subclasses: ``np.float64`` is also a ``float``.
"""


_CONVEYOR_TYPES: dict[type, Callable[..., Any]] = {}
"""conveyor's own sample types (`conveyor.vision`'s planned JPEGs) → their collate functions:
honoured by `default_collate` after every registered entry, but kept out of
`default_collate_fn_map`, whose keys stay torch's, in torch's order."""


def register_conveyor_type(kind: type, fn: Callable[..., Any]) -> None:
    """Let `default_collate` collate ``kind`` with ``fn`` (a conveyor module's own type)."""
    _CONVEYOR_TYPES[kind] = fn


def _registry() -> CollateFnMap:
    """conveyor's registry, plus what users registered in torch's (theirs win, as in torch),
    then conveyor's own types where nobody registered them."""
    registered_in_torch = user_collate_fns()
    if not registered_in_torch and not _CONVEYOR_TYPES:
        return default_collate_fn_map
    merged = dict(default_collate_fn_map)
    merged.update(registered_in_torch)  # a new type goes last, a known one keeps its place
    for kind, fn in _CONVEYOR_TYPES.items():
        merged.setdefault(kind, fn)
    return merged


def default_collate(batch: Sequence[Any]) -> Any:
    """Same as ``torch.utils.data.default_collate``; see the module docstring for differences.

    Args:
        batch: the samples of one batch (tensors, NumPy arrays and scalars, numbers, strings,
            mappings, named tuples and sequences of them).
    """
    return collate(batch, collate_fn_map=_registry())
