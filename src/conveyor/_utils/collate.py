"""torch's module path ``torch.utils.data._utils.collate``: conveyor's collation functions.

``default_collate_fn_map`` is conveyor's registry itself (the same dict object as
``conveyor.collate.default_collate_fn_map``); types registered in torch's are honoured too.
"""

from conveyor.collate import (
    collate,
    collate_float_fn,
    collate_int_fn,
    collate_numpy_array_fn,
    collate_numpy_scalar_fn,
    collate_str_fn,
    collate_tensor_fn,
    default_collate,
    default_collate_fn_map,
    default_convert,
)

__all__ = [
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
]
