"""torch's module path ``datapipes._decorator``: DataPipe decorators for typing and
determinism (``argument_validation``, ``runtime_validation``, ``non_deterministic``, ...)."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from conveyor.datapipes._typing import issubinstance

__all__ = [
    "argument_validation",
    "guaranteed_datapipes_determinism",
    "non_deterministic",
    "runtime_validation",
    "runtime_validation_disabled",
]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)

_determinism = False
_runtime_validation_enabled = True


class guaranteed_datapipes_determinism:
    """Within this context, building a DataPipe marked `non_deterministic` raises TypeError."""

    def __init__(self) -> None:
        self._previous = _determinism

    def __enter__(self) -> None:
        global _determinism
        self._previous, _determinism = _determinism, True

    def __exit__(self, *exc: object) -> None:
        global _determinism
        _determinism = self._previous


def non_deterministic(arg: Any) -> Any:
    """Mark a DataPipe class as non-deterministic, always or when ``arg(*args)`` says so.

    Args:
        arg: the DataPipe class, or a function of the constructor's arguments that says
            whether an instance is non-deterministic.
    """
    if isinstance(arg, type):
        return _guard(arg, lambda *args, **kwargs: True)

    def decorate(cls: C) -> C:
        return _guard(cls, arg)

    return decorate


def _guard(cls: C, is_nondeterministic: Callable[..., bool]) -> C:
    original: Callable[..., None] = getattr(cls, "__init__")  # noqa: B009  (mypy: unsound access)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if _determinism and is_nondeterministic(*args, **kwargs):
            raise TypeError(
                f"{cls.__name__} is non-deterministic, but you set "
                "'guaranteed_datapipes_determinism'. You can turn off determinism for this "
                "DataPipe if that is acceptable for your application"
            )
        original(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def argument_validation(f: F) -> F:
    """Check, on each call, that arguments hinted as DataPipes are DataPipes of that kind.

    Args:
        f: the function (usually a DataPipe's ``__init__``) whose arguments to check.
    """
    signature = inspect.signature(f)
    hints = typing.get_type_hints(f)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            hint = hints.get(name)
            origin = typing.get_origin(hint) or hint
            if not isinstance(origin, type) or not _is_datapipe_class(origin):
                continue
            if not isinstance(value, origin):
                raise TypeError(
                    f"Expected argument '{name}' as a {origin.__name__}, but found {type(value)}"
                )
        return f(*args, **kwargs)

    return typing.cast(F, wrapper)


def _is_datapipe_class(cls: type) -> bool:
    from conveyor.datapipes.base import IterDataPipe, MapDataPipe

    return issubclass(cls, IterDataPipe | MapDataPipe)


class runtime_validation_disabled:
    """Within this context, `runtime_validation` checks nothing."""

    def __init__(self) -> None:
        self._previous = _runtime_validation_enabled

    def __enter__(self) -> None:
        global _runtime_validation_enabled
        self._previous, _runtime_validation_enabled = _runtime_validation_enabled, False

    def __exit__(self, *exc: object) -> None:
        global _runtime_validation_enabled
        _runtime_validation_enabled = self._previous


def runtime_validation(f: F) -> F:
    """Check each item an ``__iter__`` yields against its ``Iterator[...]`` return hint.

    Args:
        f: the DataPipe's ``__iter__`` to check.
    """
    if f.__name__ != "__iter__":
        raise TypeError(f"Can not decorate function {f.__name__} with 'runtime_validation'")
    returned = typing.get_type_hints(f).get("return")
    args = typing.get_args(returned)
    expected = args[0] if args else Any

    @functools.wraps(f)
    def wrapper(self: Any) -> Iterator[Any]:
        if not _runtime_validation_enabled:
            yield from f(self)
            return
        for item in f(self):
            if not issubinstance(item, expected):
                raise RuntimeError(
                    f"Expected an instance as subtype of {expected}, but found {item}({type(item)})"
                )
            yield item

    return typing.cast(F, wrapper)
