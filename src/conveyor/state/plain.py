"""Plain data: what a checkpoint may hold, so that loading one never runs code.

A checkpoint holds only dicts (str or int keys), lists, tuples, str, int, float, bool,
None and CPU or device tensors (`torch.Tensor` itself, not a subclass): what
``torch.load(weights_only=True)`` reads and, tensors aside, what JSON writes. Nothing in
it is ever unpickled, and nothing that is not plain is ever pickled to a worker from it.

`check_plain` raises `NotPlainData`, a `TypeError` naming the key path and the type, for
anything else (nothing is copied). Saving a DataPipe graph's state copies it into plain
data with `conveyor.state.plain_form.to_plain`, which also holds a few known types in a
tagged plain form (a `DataChunk` batch inside a buffer); to this module those are
ordinary dicts.
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


def check_plain(value: Any, path: Path = ()) -> None:
    """Raise `NotPlainData` unless ``value`` is plain data (nothing is copied)."""
    if not _is_plain(value, len(path)):
        _find(value, path)


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


def _find(value: Any, path: Path) -> None:
    """Raise `NotPlainData` naming where the first value that is not plain data is."""
    kind = type(value)
    if kind in _SCALARS or kind is torch.Tensor:
        return
    if len(path) >= MAX_DEPTH:
        raise NotPlainData(path, type_name(value), f"nested deeper than {MAX_DEPTH} levels")
    if kind is dict:
        for key, item in value.items():
            if type(key) not in _KEYS:
                raise NotPlainData(
                    path, type_name(key) + " key", "a checkpoint's dict keys are str or int"
                )
            _find(item, (*path, key))
        return
    if kind is list or kind is tuple:
        for index, item in enumerate(value):
            _find(item, (*path, index))
        return
    raise NotPlainData(path, type_name(value), NOT_PLAIN_ADVICE)
