"""The one protocol every checkpointable piece follows (samplers, datasets, DataPipes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Stateful(Protocol):
    """``state_dict()`` returns a small, versioned, picklable dict; ``load_state_dict``
    makes the *next* iteration continue from it (same items, same order)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None: ...


def has_state(obj: object) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )
