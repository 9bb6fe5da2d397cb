"""Tagged plain forms: how a checkpoint holds a value of a known non-plain type.

A DataPipe's state can hold user items (a shuffle buffer, a fork's buffer, a batch being
filled), and some of those items are conveyor's own list subclasses: ``batch()`` yields a
`DataChunk`. Pickling that class into a checkpoint would make it unloadable with
``torch.load(weights_only=True)`` and would break the rule that a checkpoint is plain data
(`conveyor.state.plain`). So a registered type is written as a tagged dict,
``{"__conveyor_type__": "DataChunk", "value": [...]}``, and read back as an instance:
`to_plain` encodes, `from_plain` decodes. A user's own dict that happens to hold the tag
key is escaped (``{"__conveyor_type__": "dict", "items": [[key, value], ...]}``), so
every dict comes back as it was.

This module is the one place that knows the forms; the types register themselves
(`register_plain_form`) from the layer that defines them. Anything else that is not plain
data is refused by `to_plain` with `NotPlainData` naming the key path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from conveyor.state.plain import MAX_DEPTH, NOT_PLAIN_ADVICE, NotPlainData, Path, type_name

__all__ = ["TAG", "from_plain", "register_plain_form", "to_plain"]

TAG = "__conveyor_type__"
"""The key of a tagged dict; its value names the form."""

_ESCAPED = "dict"  # the form of a user dict that holds `TAG` itself
_SCALARS = frozenset((str, int, float, bool, type(None)))
_KEYS = frozenset((str, int))


class _Form(NamedTuple):
    kind: type
    tag: str
    to_content: Callable[[Any], Any]  # the value as something `to_plain` can encode
    from_content: Callable[[Any], Any]  # and back


_BY_TYPE: dict[type, _Form] = {}
_BY_TAG: dict[str, _Form] = {}


def register_plain_form(
    kind: type, tag: str, to_content: Callable[[Any], Any], from_content: Callable[[Any], Any]
) -> None:
    """Let checkpoints hold instances of exactly ``kind`` (not its subclasses) as
    ``{TAG: tag, "value": to_content(instance)}``, read back by ``from_content``."""
    taken = _BY_TAG.get(tag)
    if tag == _ESCAPED or (taken is not None and taken.kind is not kind):
        raise ValueError(f"the plain form {tag!r} is taken")
    form = _Form(kind, tag, to_content, from_content)
    _BY_TYPE[kind] = form
    _BY_TAG[tag] = form


class _Refusal(Exception):
    """Something is not plain data; ``path`` is filled, innermost first, as it unwinds."""

    def __init__(self, kind: str, why: str) -> None:
        self.kind = kind
        self.why = why
        self.path: list[str | int] = []


def to_plain(value: Any, path: Path = ()) -> Any:
    """``value`` as plain data: fresh dicts, lists and tuples, the same tensors (not
    cloned), registered types tagged; `NotPlainData` naming the path for anything else."""
    try:
        return _encode(value, len(path))
    except _Refusal as refusal:
        where = (*path, *reversed(refusal.path))
        raise NotPlainData(where, refusal.kind, refusal.why) from None


def _encode(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind in _SCALARS or kind is torch.Tensor:
        return value
    if depth >= MAX_DEPTH:
        raise _Refusal(type_name(value), f"nested deeper than {MAX_DEPTH} levels")
    if kind is dict:
        return _encode_dict(value, depth)
    if kind is list or kind is tuple:
        if _SCALARS.issuperset(map(type, value)):  # the common case, at C speed
            return list(value) if kind is list else value
        out = []
        for index, item in enumerate(value):
            try:
                out.append(_encode(item, depth + 1))
            except _Refusal as refusal:
                refusal.path.append(index)
                raise
        return out if kind is list else tuple(out)
    form = _BY_TYPE.get(kind)
    if form is None:
        raise _Refusal(type_name(value), NOT_PLAIN_ADVICE)
    return {TAG: form.tag, "value": _encode(form.to_content(value), depth + 1)}


def _encode_dict(value: dict[Any, Any], depth: int) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if type(key) not in _KEYS:
            raise _Refusal(type_name(key) + " key", "a checkpoint's dict keys are str or int")
        try:
            out[key] = _encode(item, depth + 1)
        except _Refusal as refusal:
            refusal.path.append(key)
            raise
    if TAG in out:
        return {TAG: _ESCAPED, "items": [[key, item] for key, item in out.items()]}
    return out


def from_plain(value: Any) -> Any:
    """What `to_plain` encoded, with registered types rebuilt; `ValueError` naming a tag
    that this conveyor does not know (a checkpoint written by a newer one, or changed)."""
    kind = type(value)
    if kind is dict:
        if TAG in value:
            return _decode_tagged(value)
        return {key: from_plain(item) for key, item in value.items()}
    if kind is list:
        return [from_plain(item) for item in value]
    if kind is tuple:
        return tuple([from_plain(item) for item in value])
    return value


def _decode_tagged(value: dict[Any, Any]) -> Any:
    tag = value[TAG]
    items = value.get("items")
    if tag == _ESCAPED and type(items) is list and all(_is_pair(pair) for pair in items):
        return {pair[0]: from_plain(pair[1]) for pair in items}
    form = _BY_TAG.get(tag) if isinstance(tag, str) else None
    if form is None or "value" not in value:
        raise ValueError(
            f"a checkpoint value tagged {TAG}={tag!r} that this conveyor cannot read (known: "
            f"{sorted(_BY_TAG)}): was the checkpoint written by another version, or changed?"
        )
    return form.from_content(from_plain(value["value"]))


def _is_pair(pair: Any) -> bool:
    return type(pair) is list and len(pair) == 2 and type(pair[0]) in _KEYS
