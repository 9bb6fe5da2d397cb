"""Iterable-style to map-style: ``to_map``."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable
from typing import Any

from conveyor.datapipes.base import DataPipe, IterDataPipe, MapDataPipe, as_iter_pipe
from conveyor.datapipes.functional import register_op

__all__ = ["IterToMapConverter"]


class IterToMapConverter(MapDataPipe[Any]):
    """A map-style pipe over the ``(key, value)`` pairs of an input (``to_map``).

    Same as torchdata's IterToMapConverter: the input is read completely at the first
    ``[]`` or ``len()`` (not before), each item mapped by ``key_value_fn`` or taken as a
    2-sequence; a duplicate key warns and the last value wins; a missing key raises
    `IndexError`. The loaded dict belongs to this pipe object and is not pickled.
    """

    def __init__(
        self,
        datapipe: IterDataPipe[Any],
        key_value_fn: Callable[[Any], tuple[Hashable, Any]] | None = None,
    ) -> None:
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        self.key_value_fn = key_value_fn
        self._map: dict[Hashable, Any] | None = None

    def _load(self) -> dict[Hashable, Any]:
        if self._map is not None:
            return self._map
        loaded: dict[Hashable, Any] = {}
        for item in self.datapipe:
            pair = self.key_value_fn(item) if self.key_value_fn is not None else item
            try:
                key, value = pair
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    "IterToMapConverter: each item (or key_value_fn result) must be a "
                    f"(key, value) pair, got {pair!r}"
                ) from exc
            if key in loaded:
                warnings.warn(
                    f"Found duplicate key {key}. Please check your `key_value_fn`",
                    stacklevel=3,
                )
            loaded[key] = value
        self._map = loaded
        return loaded

    def __getitem__(self, index: Any) -> Any:
        try:
            return self._load()[index]
        except KeyError as exc:
            raise IndexError(f"Index {index} is invalid for IterToMapConverter.") from exc

    def __len__(self) -> int:
        return len(self._load())

    def datapipe_inputs(self) -> list[DataPipe]:
        return [self.datapipe]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_map"] = None
        return state


register_op("iter.to_map", IterToMapConverter)
