"""Where buffered items came from, kept instead of the items: state O(buffer) small ints.

A node that holds items between pulls (the shuffle buffer) would otherwise checkpoint the
items themselves: megabytes of samples, copied with every batch. When its input can read
an item again from a *position* (``(unit, offset)``: a shard URL and the byte offset of a
sample's first tar header), the node keeps the positions beside the items and its state
holds only those; resuming reads the items again (`IterNode.reread`).

`PositionTable` mirrors the buffer's list operations on two NumPy arrays (a unit index and
an offset per slot) plus a small table of the units present. Its state is that table and
one word per slot, ``unit << bits | offset`` (offsets in 512-byte blocks when all are whole
blocks, as tar offsets are), little-endian, as a base64 string: plain data (a str, read
back with ``numpy.frombuffer``, never unpickled), about 5.4 bytes a slot: 10,000 buffered
samples of any size take about 54 KB. A string rather than a tensor because it is made with
every batch a worker delivers, and NumPy and base64 cost a few microseconds where a cold
torch call costs tens.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["Position", "PositionTable"]

Position = tuple[str, int]
"""``(unit, offset)``: e.g. a shard URL and the byte offset of a sample's first header."""

_BLOCK = 512  # tar offsets are whole blocks: kept in blocks when every one is
_LAYOUTS = ((32, 24), (64, 40), (64, 48))  # (word width, offset bits): the first that fits


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
        self._layout = (_LAYOUTS[0][0], _LAYOUTS[0][1], _BLOCK)  # width, bits, scale
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
        if scale == _BLOCK:
            if offset % _BLOCK:
                return None
            offset //= _BLOCK
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
        units = max([unit, *self._unit]) if self._unit else unit
        offsets = [offset, *self._offset]
        scale = _BLOCK if not any(o % _BLOCK for o in offsets) else 1
        top = max(offsets) // scale
        for width, bits in _LAYOUTS:
            if top < 1 << bits and units < 1 << (width - bits):
                break
        else:
            raise ValueError(f"positions: offset {offset} of unit {unit} fits no layout")
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
        width, bits, scale = self._layout
        return {
            "units": list(self._units),
            "slots": base64.b64encode(self._words[: len(self._unit)].tobytes()).decode("ascii"),
            "width": width,
            "bits": bits,
            "scale": scale,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], capacity: int) -> PositionTable:
        """The table ``state`` describes; ValueError naming the field when it does not fit."""
        units, width, bits, scale = (state[k] for k in ("units", "width", "bits", "scale"))
        if not isinstance(units, list) or not all(u is None or isinstance(u, str) for u in units):
            raise ValueError("positions.units: a list of unit names (or None) expected")
        if (width, bits) not in _LAYOUTS or scale not in (1, _BLOCK):
            raise ValueError(
                f"positions: no such layout (width={width!r}, bits={bits!r}, scale={scale!r})"
            )
        words = _words(state["slots"], width)
        unit, offset = words >> bits, (words & ((1 << bits) - 1)) * scale
        if len(unit) and int(unit.max()) >= len(units):
            raise ValueError(f"positions.slots: a unit index outside the {len(units)} units")
        table = cls(max(capacity, len(unit)))
        for u, o in zip(unit.tolist(), offset.tolist(), strict=True):
            name = units[u]
            if name is None:
                raise ValueError(f"positions.slots: a slot refers to free unit index {u}")
            table.append((name, o))
        return table


def _words(text: Any, width: int) -> np.ndarray[Any, Any]:
    if not isinstance(text, str):
        raise ValueError(f"positions.slots: a base64 string expected, got {type(text).__name__}")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise ValueError(f"positions.slots: not base64 ({error})") from None
    if len(raw) % (width // 8):
        raise ValueError(f"positions.slots: {len(raw)} bytes is no whole number of words")
    return np.frombuffer(raw, dtype=f"<u{width // 8}").astype(np.uint64)
