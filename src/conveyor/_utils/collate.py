"""torch's module path ``torch.utils.data._utils.collate``: conveyor's collation functions.

``default_collate_fn_map`` is conveyor's registry itself (the same dict object as
``conveyor.collate.default_collate_fn_map``); types registered in torch's are honoured too.
"""

from conveyor.collate import _STRING_OR_OBJECT_DTYPE as np_str_obj_array_pattern
from conveyor.collate import _UNSUPPORTED_FORMAT as default_collate_err_msg_format
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
    # torch's module-level names that collate functions written for torch import (MONAI)
    "default_collate_err_msg_format",
    "np_str_obj_array_pattern",
]
