"""Plain data: what a checkpoint may hold, so that loading one never runs code.

A checkpoint holds only dicts (str or int keys), lists, tuples, str, int, float, bool,
None and CPU or device tensors (`torch.Tensor` itself, not a subclass): what
``torch.load(weights_only=True)`` reads and, tensors aside, what JSON writes. Nothing in
it is ever unpickled, and nothing that is not plain is ever pickled to a worker from it.

`plain_copy` is the save side: it copies a state (fresh containers, cloned tensors, so a
dataset that hands out its own live dict cannot change a checkpoint afterwards) and raises
`NotPlainData`, a `TypeError` naming the key path and the type, for anything else.
`check_plain` is the load side: the same walk without a copy.

A few known types are held in a tagged plain form instead (a `DataChunk` batch inside a
DataPipe's buffer): `conveyor.state.plain_form` writes and reads those; to this module
they are ordinary dicts.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

__all__ = [
    "MAX_DEPTH",
    "NOT_PLAIN_ADVICE",
    "NotPlainData",
    "RefusedState",
    "check_plain",
    "describe_path",
    "plain_copy",
    "save_error",
    "type_name",
]

MAX_DEPTH = 64
"""Deeper nesting is refused (a crafted state must not exhaust the stack)."""

_SCALARS = frozenset((str, int, float, bool, type(None)))
_KEYS = frozenset((str, int))

Path = tuple[str | int, ...]


class NotPlainData(TypeError):
    """A value in a state that is not plain data; ``path`` is where, ``kind`` its type,
    ``owner`` (if given) whose ``state_dict()`` or ``load_state_dict()`` met it."""

    def __init__(self, path: Path, kind: str, why: str, owner: str = "") -> None:
        self.path = path
        self.kind = kind
        self.why = why
        prefix = f"{owner}: " if owner else ""
        super().__init__(f"{prefix}{kind} at {describe_path(path)}: {why}")

    def refused(self) -> RefusedState:
        """This refusal as a worker sends it (`RefusedState`): no owner, the same path."""
        return RefusedState(self.path, self.kind, self.why)


class RefusedState(NamedTuple):
    """A worker's stand-in for a dataset state that is not plain data: the batch still
    goes to the user; ``loader.state_dict()`` raises, naming where and what."""

    path: Path
    kind: str
    why: str


def save_error(owner: str, path: Path, kind: str, why: str) -> TypeError:
    """The `TypeError` ``state_dict()`` raises for ``owner``'s state (a class, a worker)."""
    return TypeError(
        f"DataLoader.state_dict(): the state_dict() of {owner} is not plain data: {kind} at "
        f"{describe_path(path)}: {why}"
    )


def describe_path(path: Path) -> str:
    """``("workers", "states", 0, "rng")`` -> ``workers.states[0].rng`` (``<root>`` if empty)."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "<root>"


def type_name(value: object) -> str:
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


NOT_PLAIN_ADVICE = (
    "a checkpoint holds only dicts, lists, tuples, str, int, float, bool, None and tensors "
    "(convert it: a NumPy array or scalar with .tolist()/.item() or torch.from_numpy, bytes "
    "with list(...) or a uint8 tensor)"
)


def plain_copy(value: Any, path: Path = ()) -> Any:
    """A copy of ``value`` made of plain data only; `NotPlainData` otherwise.

    Runs with every batch a worker delivers, so the walk keeps no path: only when it meets
    something that is not plain does a second walk find where, for the message."""
    try:
        return _copy(value, len(path))
    except _Refused:
        _walk(value, path, copy=False)
        raise AssertionError("unreachable: the second walk raises") from None


class _Refused(Exception):
    """Something in the state is not plain data (found by the fast walk, named by the slow)."""


def _copy(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth >= MAX_DEPTH:
        raise _Refused
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) not in _KEYS:
                raise _Refused
            out[key] = _copy(item, depth + 1)
        return out
    if kind is list:
        return [_copy(item, depth + 1) for item in value]
    if kind is tuple:
        return tuple([_copy(item, depth + 1) for item in value])
    if kind is torch.Tensor:
        return value.detach().clone()
    raise _Refused


def check_plain(value: Any, path: Path = ()) -> None:
    """Raise `NotPlainData` unless ``value`` is plain data (nothing is copied)."""
    if not _is_plain(value, len(path)):
        _walk(value, path, copy=False)


def _is_plain(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind in _SCALARS or kind is torch.Tensor:
        return True
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        return all(type(key) in _KEYS and _is_plain(item, depth + 1) for key, item in value.items())
    if kind is list or kind is tuple:
        return all(_is_plain(item, depth + 1) for item in value)
    return False


def _walk(value: Any, path: Path, copy: bool) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if len(path) >= MAX_DEPTH:
        raise NotPlainData(path, type_name(value), f"nested deeper than {MAX_DEPTH} levels")
    if kind is dict:
        return _walk_dict(value, path, copy)
    if kind is list or kind is tuple:
        items = [_walk(item, (*path, index), copy) for index, item in enumerate(value)]
        if not copy:
            return value
        return items if kind is list else tuple(items)
    if kind is torch.Tensor:
        return value.detach().clone() if copy else value
    raise NotPlainData(path, type_name(value), NOT_PLAIN_ADVICE)


def _walk_dict(value: dict[Any, Any], path: Path, copy: bool) -> Any:
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if type(key) not in _KEYS:
            raise NotPlainData(
                path, type_name(key) + " key", "a checkpoint's dict keys are str or int"
            )
        walked = _walk(item, (*path, key), copy)
        if copy:
            out[key] = walked
    return out if copy else value
