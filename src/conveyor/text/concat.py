"""Concatenate-and-split, vectorised: rows cut from a unit's token stream with NumPy.

The unit's documents are one stream of tokens; row ``k`` is ``seq_len`` tokens of it, its
labels the stream shifted by one (ignored where a document ends), its positions counted
from each document start. A batch's documents are whole, so a row is a slice of one
array; the document that crosses into the next batch (and only its tokens) is carried
over. No Python runs per document: a row costs a few NumPy calls, whatever it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from conveyor.text.documents import TokenBatch
from conveyor.text.layout import IGNORE_INDEX, Packing, ResumePoint

__all__ = ["concat_rows"]

PackedRow = tuple[dict[str, NDArray[Any]], int, ResumePoint]
Dropped = Callable[[int, int], None]


class _Stream:
    """Documents not fully cut into rows yet: tokens, offsets and numbers."""

    def __init__(self) -> None:
        self.tokens: NDArray[Any] = np.zeros(0, np.int64)
        self.offsets: NDArray[np.int64] = np.zeros(1, np.int64)
        self.numbers: NDArray[np.int64] = np.zeros(0, np.int64)

    def extend(self, batch: TokenBatch) -> None:
        if self.numbers.size == 0:
            self.tokens, self.offsets, self.numbers = batch.tokens, batch.offsets, batch.numbers
            return
        carried = int(self.offsets[-1])
        self.tokens = np.concatenate((self.tokens, batch.tokens))
        self.offsets = np.concatenate((self.offsets[:-1], batch.offsets + carried))
        self.numbers = np.concatenate((self.numbers, batch.numbers))

    def keep_from(self, position: int) -> int:
        """Drop the documents before the one holding ``position``; its new position."""
        first = int(np.searchsorted(self.offsets, position, side="right")) - 1
        first = min(first, self.numbers.size)
        base = int(self.offsets[first])
        self.tokens = self.tokens[base:]
        self.offsets = self.offsets[first:] - base
        self.numbers = self.numbers[first:]
        return position - base

    def after(self, end: int) -> ResumePoint:
        """Where the row that starts at ``end`` begins: (document, token)."""
        document = int(np.searchsorted(self.offsets, end, side="right")) - 1
        if document >= self.numbers.size:
            return ResumePoint(int(self.numbers[-1]) + 1, 0)
        return ResumePoint(int(self.numbers[document]), end - int(self.offsets[document]))


def _without_long(batch: TokenBatch, size: int, dropped: Dropped) -> TokenBatch:
    lengths = np.diff(batch.offsets)
    long = lengths > size
    if not long.any():
        return batch
    for number, length in zip(batch.numbers[long].tolist(), lengths[long].tolist(), strict=True):
        dropped(number, length)
    keep = ~long
    offsets = np.zeros(int(keep.sum()) + 1, np.int64)
    np.cumsum(lengths[keep], out=offsets[1:])
    return TokenBatch(batch.numbers[keep], batch.tokens[np.repeat(keep, lengths)], offsets)


def concat_rows(
    packing: Packing, batches: Iterable[TokenBatch], skip: int, dropped: Dropped
) -> Iterator[PackedRow]:
    """Rows of a unit whose first batch starts at its first document's token ``skip``."""
    size = packing.seq_len
    stream = _Stream()
    position = -1
    for given in batches:
        batch = _without_long(given, size, dropped) if packing.long_docs == "drop" else given
        if batch.numbers.size == 0:
            continue
        stream.extend(batch)
        if position < 0:
            position = int(stream.offsets[0]) + skip
        total = int(stream.offsets[-1])
        while position + size <= total:
            count = min(_BLOCK_ROWS, (total - position) // size)
            yield from _block(stream, position, count, packing)
            position += count * size
        position = stream.keep_from(position)
    if position >= 0 and position < int(stream.offsets[-1]):
        end = int(stream.offsets[-1])
        yield _row(stream, position, end - position, packing), end - position, stream.after(end)


_BLOCK_ROWS = 32  # full rows cut with one set of NumPy calls


def _block(stream: _Stream, start: int, count: int, packing: Packing) -> Iterator[PackedRow]:
    """``count`` full rows from ``start``, cut together: 2-D arrays whose rows are views.
    Same values as `_row` gives one by one."""
    size, tokens, offsets = packing.seq_len, stream.tokens, stream.offsets
    end = start + count * size
    if packing.labels != "shifted" or end >= tokens.size:
        for k in range(count):
            at = start + k * size
            yield _row(stream, at, size, packing), size, stream.after(at + size)
        return
    ids = tokens[start:end].astype(np.int64).reshape(count, size)
    labels = tokens[start + 1 : end + 1].astype(np.int64)
    inner = offsets[
        np.searchsorted(offsets, start, side="right") : np.searchsorted(offsets, end, "right")
    ]
    labels[inner - start - 1] = IGNORE_INDEX  # a document's last token predicts nothing
    row_starts = np.arange(start, end, size, dtype=np.int64)
    cuts = np.union1d(row_starts, inner[inner < end])  # where a segment begins
    segment = np.repeat(cuts - start, np.diff(np.append(cuts, end)))
    positions = (np.arange(count * size, dtype=np.int64) - segment).reshape(count, size)
    labels = labels.reshape(count, size)
    ends = row_starts + size
    for k in range(count):
        row = {"input_ids": ids[k], "labels": labels[k], "position_ids": positions[k]}
        if packing.boundaries:
            mine = cuts[(cuts > row_starts[k]) & (cuts < ends[k])] - row_starts[k]
            row["cu_seqlens"] = np.concatenate(([0], mine, [size])).astype(np.int32)
        yield row, size, stream.after(int(ends[k]))


def _row(stream: _Stream, start: int, count: int, packing: Packing) -> dict[str, NDArray[Any]]:
    """Row of ``count`` tokens from ``start`` (padded to ``seq_len``)."""
    size, tokens, offsets = packing.seq_len, stream.tokens, stream.offsets
    end = start + count
    inner = offsets[
        np.searchsorted(offsets, start, side="right") : np.searchsorted(offsets, end, "right")
    ]  # document boundaries in (start, end]
    starts = inner[inner < end] - start  # documents beginning inside the row
    bounds = np.empty(starts.size + (3 if count < size else 2), dtype=np.int64)
    bounds[0], bounds[1 : starts.size + 1] = 0, starts
    bounds[starts.size + 1 :] = (count, size) if count < size else (count,)
    input_ids, labels = _ids_and_labels(tokens, start, count, packing)
    if packing.labels == "shifted":
        labels[inner - start - 1] = IGNORE_INDEX  # a document's last token predicts nothing
    else:
        labels[starts] = IGNORE_INDEX
    # each position minus the start of its segment (the padding is a segment of its own)
    segment = np.repeat(bounds[:-1], bounds[1:] - bounds[:-1])
    row = {
        "input_ids": input_ids,
        "labels": labels,
        "position_ids": _ARANGE[:size] - segment
        if size <= _ARANGE.size
        else (np.arange(size, dtype=np.int64) - segment),
    }
    if packing.boundaries:
        row["cu_seqlens"] = bounds.astype(np.int32)
    return row


_ARANGE = np.arange(1 << 16, dtype=np.int64)


def _ids_and_labels(
    tokens: NDArray[Any], start: int, count: int, packing: Packing
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``input_ids`` and ``labels`` before document ends are marked: one cast each for a
    full row, padding (and ignored labels) after a short one."""
    size, end = packing.seq_len, start + count
    if count == size:
        input_ids = tokens[start:end].astype(np.int64)
    else:
        input_ids = np.full(size, packing.pad_id, dtype=np.int64)
        input_ids[:count] = tokens[start:end]
    if packing.labels != "shifted":
        labels = input_ids.copy()
        labels[0] = IGNORE_INDEX
        labels[count:] = IGNORE_INDEX
        return input_ids, labels
    if count == size and end < tokens.size:
        return input_ids, tokens[start + 1 : end + 1].astype(np.int64)
    labels = np.full(size, IGNORE_INDEX, dtype=np.int64)
    labels[: count - 1] = tokens[start + 1 : end]
    if end < tokens.size:
        labels[count - 1] = tokens[end]
    return input_ids, labels
