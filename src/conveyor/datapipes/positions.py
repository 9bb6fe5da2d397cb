"""Where buffered items came from, kept instead of the items: state O(buffer) small ints.

A node that holds items between pulls (the shuffle buffer) would otherwise checkpoint the
items themselves: megabytes of samples, copied with every batch. When its input can read
an item again from a *position* (``(unit, offset)``: a shard URL and the byte offset of a
sample's first tar header), the node keeps the positions beside the items and its state
holds only those; resuming reads the items again (`IterNode.reread`).

`PositionTable` mirrors the buffer's list operations on two NumPy arrays (a unit index and
an offset per slot) plus a small table of the units present. Its state is two tensors and
that table: 10,000 positions of tar samples take about 50 KB (offsets in 512-byte blocks,
a unit index of one or two bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["Position", "PositionTable"]

Position = tuple[str, int]
"""``(unit, offset)``: e.g. a shard URL and the byte offset of a sample's first header."""

_BLOCK = 512  # tar offsets are whole blocks: kept in blocks when every one is


class PositionTable:
    """The positions of a buffer's items, slot by slot, mirroring its list operations."""

    def __init__(self, capacity: int) -> None:
        self._unit = np.zeros(max(1, capacity), dtype=np.int32)
        self._offset = np.zeros(max(1, capacity), dtype=np.int64)
        self._length = 0
        self._units: list[str | None] = []  # index -> unit (None: free slot)
        self._index: dict[str, int] = {}  # unit -> index
        self._refs: list[int] = []  # index -> slots holding it

    def __len__(self) -> int:
        return self._length

    def _intern(self, unit: str) -> int:
        index = self._index.get(unit)
        if index is None:
            index = self._units.index(None) if None in self._units else len(self._units)
            if index == len(self._units):
                self._units.append(unit)
                self._refs.append(0)
            else:
                self._units[index] = unit
            self._index[unit] = index
        self._refs[index] += 1
        return index

    def _release(self, index: int) -> None:
        self._refs[index] -= 1
        if self._refs[index] == 0:
            unit = self._units[index]
            assert unit is not None
            del self._index[unit]
            self._units[index] = None

    def _grow(self) -> None:
        self._unit = np.concatenate([self._unit, np.zeros_like(self._unit)])
        self._offset = np.concatenate([self._offset, np.zeros_like(self._offset)])

    def append(self, position: Position) -> None:
        if self._length == len(self._unit):
            self._grow()
        self._unit[self._length] = self._intern(position[0])
        self._offset[self._length] = position[1]
        self._length += 1

    def replace(self, slot: int, position: Position) -> None:
        """Slot ``slot`` now holds the item at ``position`` (its old item left)."""
        self._release(int(self._unit[slot]))
        self._unit[slot] = self._intern(position[0])
        self._offset[slot] = position[1]

    def swap_pop(self, slot: int) -> None:
        """``buffer[slot], buffer[-1] = buffer[-1], buffer[slot]; buffer.pop()``."""
        last = self._length - 1
        self._release(int(self._unit[slot]))
        self._unit[slot] = self._unit[last]
        self._offset[slot] = self._offset[last]
        self._length = last

    def positions(self) -> list[Position]:
        units = self._units
        return [
            (str(units[int(u)]), int(o))
            for u, o in zip(self._unit[: self._length], self._offset[: self._length], strict=True)
        ]

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        """Plain data: the units table, a unit index and an offset per slot (tensors)."""
        n = self._length
        offsets = self._offset[:n]
        scale = _BLOCK if n and not np.any(offsets % _BLOCK) else 1
        scaled = offsets // scale
        fits32 = not n or int(scaled.max()) < 2**31
        unit_dtype = np.uint8 if len(self._units) <= 256 else np.int32
        return {
            "units": list(self._units),
            "unit": torch.from_numpy(self._unit[:n].astype(unit_dtype)),
            "offset": torch.from_numpy(scaled.astype(np.int32 if fits32 else np.int64)),
            "scale": scale,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], capacity: int) -> PositionTable:
        """The table `state` describes; ValueError naming the field when it does not fit."""
        units, unit, offset = state["units"], state["unit"], state["offset"]
        if not isinstance(units, list) or not all(u is None or isinstance(u, str) for u in units):
            raise ValueError("positions.units: a list of unit names (or None) expected")
        scale = state["scale"]
        if scale not in (1, _BLOCK) or type(scale) is not int:
            raise ValueError(f"positions.scale: 1 or {_BLOCK} expected, got {scale!r}")
        unit_array = _as_array(unit, "positions.unit")
        offset_array = _as_array(offset, "positions.offset") * scale
        if len(unit_array) != len(offset_array):
            raise ValueError(f"positions: {len(unit_array)} units but {len(offset_array)} offsets")
        if len(unit_array) and (unit_array.min() < 0 or unit_array.max() >= len(units)):
            raise ValueError(f"positions.unit: an index outside the {len(units)} units")
        if len(offset_array) and offset_array.min() < 0:
            raise ValueError("positions.offset: a negative offset")
        table = cls(max(capacity, len(unit_array)))
        for u, o in zip(unit_array.tolist(), offset_array.tolist(), strict=True):
            name = units[u]
            if name is None:
                raise ValueError(f"positions.unit: slot refers to free unit index {u}")
            table.append((name, o))
        return table


def _as_array(value: Any, field: str) -> np.ndarray[Any, Any]:
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.dtype.is_floating_point or value.dtype.is_complex:
            raise ValueError(f"{field}: a 1-D integer tensor expected, got {value.dtype}")
        return value.to(torch.int64).numpy()
    if isinstance(value, Sequence) and all(type(v) is int for v in value):
        return np.asarray(value, dtype=np.int64)  # e.g. from StatefulDataLoader's JSON
    raise ValueError(f"{field}: a 1-D integer tensor expected, got {type(value).__name__}")
