"""The registry of built-in DataPipe operations: functional name -> node class.

The typed methods of `IterDataPipe` and `MapDataPipe` (`conveyor.datapipes.base`) build
their nodes through `build`; each node module registers its classes with `register_op`
when it is imported; `build` and `registered_ops` import the operation packages on first
use, so a loader that never builds a node never pays for them. The base classes import no
node module, and no import circle runs through the operations.
Names are ``"iter.<name>"`` and ``"map.<name>"``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["build", "register_op", "registered_ops"]

_OPS: dict[str, Callable[..., Any]] = {}


def register_op(name: str, node: Callable[..., Any]) -> None:
    """Make the typed method ``name`` (``"iter.map"``) build ``node(source, ...)``."""
    _OPS[name] = node


def build(name: str, *args: Any, **kwargs: Any) -> Any:
    """The node registered as ``name``, built with ``args`` (the source pipe first)."""
    node = _OPS.get(name)
    if node is None:
        _import_operations()
        node = _OPS.get(name)
    if node is None:
        raise RuntimeError(f"DataPipe operation {name!r} is not registered")
    return node(*args, **kwargs)


def registered_ops() -> dict[str, Callable[..., Any]]:
    """Every registered operation (a copy), for tests and documentation."""
    _import_operations()
    return dict(_OPS)


def _import_operations() -> None:
    """Import the built-in node modules, which register themselves (once; cheap after)."""
    importlib.import_module("conveyor.datapipes.iter")
    importlib.import_module("conveyor.datapipes.map")
