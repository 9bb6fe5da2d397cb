"""Column selection shared by ``map``, ``filter`` and ``flatmap`` (torch's ``input_col``).

``input_col`` is None (apply to the whole item), an index or key (apply to ``item[col]``),
or a list/tuple of them (apply to ``*(item[c] for c in cols)``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["call_on_columns", "validate_input_col"]


def validate_input_col(fn: Callable[..., Any], input_col: Any) -> None:
    """Raise `ValueError` if ``fn`` cannot take as many positional arguments as columns.

    Same check as torch: functions with required keyword-only parameters are refused, and
    a function whose signature cannot be inspected (a builtin) is accepted.
    """
    try:
        signature = inspect.signature(fn)
    except (ValueError, TypeError):
        return
    wanted = len(input_col) if isinstance(input_col, list | tuple) else 1
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    var_positional = any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values())
    required_kw = [
        p
        for p in signature.parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.default is p.empty
    ]
    name = _name(fn)
    if required_kw:
        raise ValueError(
            f"The function {name} takes {len(required_kw)} non-default keyword-only "
            "parameters, which is not allowed."
        )
    if len(positional) < wanted and not var_positional:
        raise ValueError(
            f"The function {name} takes {len(positional)} positional parameters, "
            f"but {wanted} are required."
        )
    if any(p.default is p.empty for p in positional[wanted:]):
        raise ValueError(
            f"The function {name} takes {len(positional)} positional parameters, "
            f"but {wanted} are required."
        )


def call_on_columns(fn: Callable[..., Any], data: Any, input_col: Any) -> Any:
    """``fn`` applied to the selected columns of ``data``."""
    if input_col is None:
        return fn(data)
    if isinstance(input_col, list | tuple):
        return fn(*(data[col] for col in input_col))
    return fn(data[input_col])


def _name(fn: Callable[..., Any]) -> str:
    if isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", repr(fn))
