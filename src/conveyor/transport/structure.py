"""Rebuilding containers like a template: shared by collation and pinning (torch's rules)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any


def rebuild_mapping(template: Mapping[Any, Any], values: dict[Any, Any]) -> Any:
    """A mapping like ``template`` holding ``values``, else ``values`` itself.

    A mutable mapping is copied and updated so that extra attributes (a defaultdict's
    factory) survive.
    """
    try:
        if isinstance(template, MutableMapping):
            clone = copy.copy(template)
            clone.update(values)
            return clone
        return type(template)(values)  # type: ignore[call-arg]
    except TypeError:
        return values


def rebuild_sequence(template: Sequence[Any], items: list[Any]) -> Any:
    """A sequence like ``template`` holding ``items``, else ``items`` itself."""
    try:
        if isinstance(template, MutableSequence):
            clone = copy.copy(template)
            for index, item in enumerate(items):
                clone[index] = item
            return clone
        return type(template)(items)  # type: ignore[call-arg]
    except TypeError:
        return items


def is_namedtuple(obj: object) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")
