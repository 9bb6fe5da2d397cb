"""A packed row as arrays, and batches of rows as tensors.

A row is ``input_ids``, ``labels`` and ``position_ids`` (``int64``, ``seq_len`` each) and,
with ``boundaries``, ``cu_seqlens``: where each document starts in the row and where the
row ends (``int32``; padding, when there is some, is a segment of its own), the layout
FlashAttention's variable-length kernels take once `collate_packed` has added the rows'
offsets. ``position_ids`` restart at 0 at every segment, which is also how Hugging Face
models find document boundaries (``DataCollatorWithFlattening``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from conveyor.text.layout import IGNORE_INDEX, Packing, Piece

__all__ = ["build_row", "collate_packed", "row_tokens"]

_ARANGE = np.arange(1 << 16, dtype=np.int64)


def _positions(count: int) -> NDArray[np.int64]:
    return _ARANGE[:count] if count <= _ARANGE.size else np.arange(count, dtype=np.int64)


def row_tokens(pieces: Sequence[Piece]) -> int:
    """Real (not padding) tokens in a row."""
    return sum(int(piece.tokens.size) for piece in pieces)


def build_row(pieces: Sequence[Piece], packing: Packing) -> dict[str, NDArray[Any]]:
    """The arrays of one row; see the module docstring."""
    size = packing.seq_len
    input_ids = np.full(size, packing.pad_id, dtype=np.int64)
    labels = np.full(size, IGNORE_INDEX, dtype=np.int64)
    position_ids = np.empty(size, dtype=np.int64)
    shifted = packing.labels == "shifted"
    bounds = [0]
    at = 0
    for tokens, following in pieces:
        count = int(tokens.size)
        end = at + count
        input_ids[at:end] = tokens
        if shifted:
            labels[at : end - 1] = tokens[1:]
            labels[end - 1] = following
        else:
            labels[at + 1 : end] = tokens[1:]
        position_ids[at:end] = _positions(count)
        at = end
        bounds.append(at)
    if at < size:
        position_ids[at:] = _positions(size - at)
        bounds.append(size)
    row = {"input_ids": input_ids, "labels": labels, "position_ids": position_ids}
    if packing.boundaries:
        row["cu_seqlens"] = np.asarray(bounds, dtype=np.int32)
    return row


def collate_packed(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Stack rows into a batch: ``input_ids``, ``labels``, ``position_ids`` as
    ``(batch, seq_len)`` int64 tensors; ``cu_seqlens`` as one int32 tensor of the
    boundaries of every segment of the flattened batch, and ``max_seqlen``, the longest
    segment (FlashAttention's ``flash_attn_varlen_func`` arguments). Other keys are
    stacked (arrays) or listed."""
    if not rows:
        raise ValueError("collate_packed needs at least one row")
    batch: dict[str, Any] = {}
    for key in rows[0]:
        if key == "cu_seqlens":
            continue
        values = [row[key] for row in rows]
        if isinstance(values[0], np.ndarray):
            batch[key] = torch.from_numpy(np.stack(values))
        else:
            batch[key] = values
    if "cu_seqlens" in rows[0]:
        size = int(rows[0]["input_ids"].shape[0])
        parts = [rows[0]["cu_seqlens"]]
        parts += [row["cu_seqlens"][1:] + i * size for i, row in enumerate(rows[1:], start=1)]
        bounds = np.concatenate(parts).astype(np.int32)
        batch["cu_seqlens"] = torch.from_numpy(bounds)
        batch["max_seqlen"] = int(np.diff(bounds).max())
    return batch
