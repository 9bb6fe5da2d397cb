"""Where buffered items came from, kept instead of the items: state O(buffer) small ints.

A node that holds items between pulls (the shuffle buffer) would otherwise checkpoint the
items themselves: megabytes of samples, copied with every batch. When its input can read
an item again from a *position* (``(unit, offset)``: a shard URL and the byte offset of a
sample's first tar header), the node keeps the positions beside the items and its state
holds only those; resuming reads the items again (`IterNode.reread`).

`PositionTable` mirrors the buffer's list operations and keeps each slot's packed word
(`conveyor.state.position_codec`: a units table and a base64 string, about 5.4 bytes a
slot, so 10,000 buffered samples of any size take about 54 KB). A string rather than a
tensor because it is made with every batch a worker delivers, and NumPy and base64 cost a
few microseconds where a cold torch call costs tens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from conveyor.state.position_codec import (
    BLOCK,
    LAYOUTS,
    Position,
    decode_positions,
    encode,
    layout_for,
)

__all__ = ["Position", "PositionTable"]


class PositionTable:
    """The positions of a buffer's items, slot by slot, mirroring its list operations.

    Each slot's packed word is kept up to date as the buffer changes (one NumPy scalar
    write per item), so a state costs one copy and a base64 encoding, and no NumPy
    operation that could release the GIL (thread workers would then wait for it)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = max(1, capacity)
        self._unit: list[int] = []  # slot -> unit index
        self._offset: list[int] = []  # slot -> offset in bytes
        self._units: list[str | None] = []  # unit index -> unit (None: free)
        self._index: dict[str, int] = {}  # unit -> unit index
        self._refs: list[int] = []  # unit index -> slots holding it
        self._layout = (LAYOUTS[0][0], LAYOUTS[0][1], BLOCK)  # width, bits, scale
        self._words = np.zeros(self._capacity, dtype="<u4")

    def __len__(self) -> int:
        return len(self._unit)

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

    def _word(self, unit: int, offset: int) -> int | None:
        """``unit << bits | offset`` in the current layout, or None if it does not fit."""
        width, bits, scale = self._layout
        if scale == BLOCK:
            if offset % BLOCK:
                return None
            offset //= BLOCK
        if offset >= 1 << bits or unit >= 1 << (width - bits) or offset < 0:
            return None
        return (unit << bits) | offset

    def _store(self, slot: int, unit: int, offset: int) -> None:
        word = self._word(unit, offset)
        if word is None:
            self._relayout(unit, offset)
            word = self._word(unit, offset)
            assert word is not None
        if slot == len(self._words):
            self._words = np.concatenate([self._words, np.zeros_like(self._words)])
        self._words[slot] = word

    def _relayout(self, unit: int, offset: int) -> None:
        """A wider word, or byte offsets, for a position the layout cannot hold (rare)."""
        units = max([unit, *self._unit]) + 1
        offsets = [offset, *self._offset]
        scale = BLOCK if not any(o % BLOCK for o in offsets) else 1
        width, bits = layout_for(max(offsets), units, scale)
        self._layout = (width, bits, scale)
        self._words = np.zeros(max(len(self._words), 1), dtype=f"<u{width // 8}")
        for slot, (u, o) in enumerate(zip(self._unit, self._offset, strict=True)):
            self._words[slot] = self._word(u, o)

    def append(self, position: Position) -> None:
        unit, offset = self._intern(position[0]), position[1]
        self._store(len(self._unit), unit, offset)
        self._unit.append(unit)
        self._offset.append(offset)

    def replace(self, slot: int, position: Position) -> None:
        """Slot ``slot`` now holds the item at ``position`` (its old item left)."""
        self._release(self._unit[slot])
        unit, offset = self._intern(position[0]), position[1]
        self._store(slot, unit, offset)
        self._unit[slot], self._offset[slot] = unit, offset

    def swap_pop(self, slot: int) -> None:
        """``buffer[slot], buffer[-1] = buffer[-1], buffer[slot]; buffer.pop()``."""
        self._release(self._unit[slot])
        last_unit, last_offset = self._unit.pop(), self._offset.pop()
        if slot < len(self._unit):
            self._unit[slot], self._offset[slot] = last_unit, last_offset
            self._words[slot] = self._words[len(self._unit)]

    def positions(self) -> list[Position]:
        units = self._units
        return [(str(units[u]), o) for u, o in zip(self._unit, self._offset, strict=True)]

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        """Plain data: the units table and one packed word per slot (see the module)."""
        return encode(self._units, self._words[: len(self._unit)], self._layout)

    @classmethod
    def from_state(cls, state: Mapping[str, Any], capacity: int) -> PositionTable:
        """The table ``state`` describes; ValueError naming the field when it does not fit."""
        positions = decode_positions(state)
        table = cls(max(capacity, len(positions)))
        for position in positions:
            table.append(position)
        return table
