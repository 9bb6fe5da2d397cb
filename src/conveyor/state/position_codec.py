"""Positions ``(unit, offset)`` as plain data: a units table and one packed word per slot.

The form a shuffle buffer's positions take in a checkpoint (`conveyor.datapipes.positions`
keeps it up to date as the buffer changes) and the form `conveyor.state.elastic` merges
when samples read but not delivered are dealt out to a new set of consumers. Each slot is
``unit << bits | offset`` (offsets in 512-byte blocks when all are whole blocks, as tar
offsets are), little-endian, as a base64 string: a str, read back with
``numpy.frombuffer``, never unpickled; about 5.4 bytes a slot.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["BLOCK", "LAYOUTS", "Position", "decode_positions", "encode_positions", "layout_for"]

Position = tuple[str, int]
"""``(unit, offset)``: e.g. a shard URL and the byte offset of a sample's first header."""

BLOCK = 512  # tar offsets are whole blocks: kept in blocks when every one is
LAYOUTS = ((32, 24), (64, 40), (64, 48))  # (word width, offset bits): the first that fits


def layout_for(top_offset: int, units: int, scale: int) -> tuple[int, int]:
    """The narrowest ``(width, bits)`` holding offsets up to ``top_offset`` (bytes) of
    ``units`` units at ``scale``; ValueError if none does."""
    top = top_offset // scale
    for width, bits in LAYOUTS:
        if top < 1 << bits and units <= 1 << (width - bits):
            return width, bits
    raise ValueError(f"positions: offset {top_offset} of {units} units fits no checkpoint word")


def encode(
    units: list[str | None], words: np.ndarray[Any, Any], layout: tuple[int, ...]
) -> dict[str, Any]:
    """The plain form of ``words`` (already packed in ``layout`` = width, bits, scale)."""
    width, bits, scale = layout
    return {
        "units": list(units),
        "slots": base64.b64encode(words.tobytes()).decode("ascii"),
        "width": width,
        "bits": bits,
        "scale": scale,
    }


def encode_positions(positions: Sequence[Position]) -> dict[str, Any]:
    """``positions`` in plain form (a fresh units table, the narrowest layout)."""
    index: dict[str, int] = {}
    unit_of = [index.setdefault(u, len(index)) for u, _ in positions]
    units: list[str | None] = list(index)
    offsets = [o for _, o in positions]
    scale = BLOCK if not any(o % BLOCK for o in offsets) else 1
    width, bits = layout_for(max(offsets, default=0), len(units), scale)
    kind = f"<u{width // 8}"
    words = (np.asarray(unit_of, dtype=kind) << bits) | (
        np.asarray(offsets, dtype=np.uint64) // scale
    ).astype(kind)
    return encode(units, words.astype(kind), (width, bits, scale))


def decode_positions(state: Mapping[str, Any]) -> list[Position]:
    """The positions a plain form holds; ValueError naming the field when it is damaged."""
    units, width, bits, scale = (state[k] for k in ("units", "width", "bits", "scale"))
    if not isinstance(units, list) or not all(u is None or isinstance(u, str) for u in units):
        raise ValueError("positions.units: a list of unit names (or None) expected")
    if (width, bits) not in LAYOUTS or scale not in (1, BLOCK):
        raise ValueError(
            f"positions: no such layout (width={width!r}, bits={bits!r}, scale={scale!r})"
        )
    words = _words(state["slots"], width)
    unit, offset = words >> np.uint64(bits), (words & np.uint64((1 << bits) - 1)) * np.uint64(scale)
    if len(unit) and int(unit.max()) >= len(units):
        raise ValueError(f"positions.slots: a unit index outside the {len(units)} units")
    found = []
    for u, o in zip(unit.tolist(), offset.tolist(), strict=True):
        name = units[u]
        if name is None:
            raise ValueError(f"positions.slots: a slot refers to free unit index {u}")
        found.append((name, o))
    return found


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
