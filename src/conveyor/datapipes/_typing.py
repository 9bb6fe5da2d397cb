"""torch's module path ``datapipes._typing``: structural type checks on values and hints.

A small, self-contained version of torch's checks, used by `runtime_validation`:
``issubtype(left, right)`` for typing hints (``Any``, TypeVars, unions, ``list[int]``,
``tuple[int, str]``, ...) and ``issubinstance(value, hint)`` for values.
"""

from __future__ import annotations

import collections.abc
import typing
from typing import Any, TypeVar, Union

__all__ = ["issubinstance", "issubtype"]

_ORIGINS: dict[Any, type] = {
    list: list,
    tuple: tuple,
    dict: dict,
    set: set,
}


def _origin(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is None:
        origin = _ORIGINS.get(hint, hint)
    return origin


def _options(hint: Any) -> tuple[Any, ...]:
    """The alternatives a hint allows: union members, TypeVar constraints, or itself."""
    if typing.get_origin(hint) is Union:
        return typing.get_args(hint)
    if isinstance(hint, TypeVar):
        if hint.__constraints__:
            return hint.__constraints__
        return (hint.__bound__,) if hint.__bound__ is not None else (Any,)
    return (hint,)


def issubtype(left: Any, right: Any, recursive: bool = True) -> bool:
    """Whether every value of hint ``left`` is a value of hint ``right``."""
    if right is Any or left == right:
        return True
    if isinstance(right, TypeVar) and not right.__constraints__ and right.__bound__ is None:
        return True
    if left is Any:
        return False
    rights = _options(right)
    return all(
        any(_issubtype_one(one, option, recursive) for option in rights) for one in _options(left)
    )


def _issubtype_one(left: Any, right: Any, recursive: bool) -> bool:
    if right is Any or left == right:
        return True
    left_origin, right_origin = _origin(left), _origin(right)
    if not (isinstance(left_origin, type) and isinstance(right_origin, type)):
        return False
    if not issubclass(left_origin, right_origin):
        return False
    right_args = typing.get_args(right)
    if not recursive or not right_args:
        return True
    left_args = typing.get_args(left)
    if len(left_args) != len(right_args):
        return False
    return all(issubtype(a, b) for a, b in zip(left_args, right_args, strict=True))


def issubinstance(value: Any, hint: Any) -> bool:
    """Whether ``value`` is a value of ``hint``, elements of containers included."""
    return any(_isinstance_one(value, option) for option in _options(hint))


def _isinstance_one(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    origin = _origin(hint)
    if not isinstance(origin, type) or not isinstance(value, origin):
        return False
    args = typing.get_args(hint)
    if not args:
        return True
    if isinstance(value, collections.abc.Mapping):
        key_hint, value_hint = args
        return all(
            issubinstance(k, key_hint) and issubinstance(v, value_hint) for k, v in value.items()
        )
    if isinstance(value, tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return all(issubinstance(item, args[0]) for item in value)
        return len(args) == len(value) and all(
            issubinstance(item, arg) for item, arg in zip(value, args, strict=True)
        )
    if isinstance(value, collections.abc.Iterable):
        return all(issubinstance(item, args[0]) for item in value)
    return True
