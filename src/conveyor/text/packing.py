"""Packing documents into rows of ``seq_len`` tokens: concatenate-and-split, or best-fit.

A packer turns a unit's documents (token batches, in order) into rows
(`conveyor.text.rows`: ``input_ids``, ``labels``, ``position_ids``, ``cu_seqlens``) and
says after every row where the *next* row starts, as a `ResumePoint` of two numbers.
Reading the unit again from that point gives exactly the rows that followed: that is all
a checkpoint needs, mid-document and mid-row included.

- ``"concat"``: documents back to back, cut every ``seq_len`` tokens (`conveyor.text.concat`,
  vectorised); a unit's last row is padded. Resume point: (document, token) where the
  next row starts.
- ``"best_fit"``: windows of ``window`` documents; each window's documents (longest first)
  go into the row with the least room that fits them (best-fit decreasing), rows in the
  order they were opened. Resume point: (first document of the window, rows of the window
  already given).

Documents longer than ``seq_len``: ``long_docs="split"`` cuts them into rows of
``seq_len`` (best-fit packs the rest); ``"drop"`` leaves them out, counted by the caller.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator

import numpy as np
from numpy.typing import NDArray

from conveyor.text.concat import PackedRow, concat_rows
from conveyor.text.documents import TokenBatch
from conveyor.text.layout import IGNORE_INDEX, Packing, Piece, ResumePoint
from conveyor.text.rows import build_row, row_tokens

__all__ = ["IGNORE_INDEX", "Packing", "Piece", "ResumePoint", "pack"]

Row = list[Piece]
Dropped = Callable[[int, int], None]  # (document number, its tokens): a long document left out


def pack(
    packing: Packing, batches: Iterable[TokenBatch], start: ResumePoint, dropped: Dropped
) -> Iterator[PackedRow]:
    """The rows of a unit read from ``start`` (its batches begin at ``start.document``):
    each row's arrays (`conveyor.text.rows`), its real tokens, and the point where the
    next row starts."""
    if packing.method == "concat":
        return concat_rows(packing, batches, start.within, dropped)
    return _built(packing, _best_fit(packing, batches, start.within, dropped))


def _built(packing: Packing, rows: Iterator[tuple[Row, ResumePoint]]) -> Iterator[PackedRow]:
    for row, after in rows:
        yield build_row(row, packing), row_tokens(row), after


def _documents(batches: Iterable[TokenBatch]) -> Iterator[tuple[int, NDArray[np.integer]]]:
    for batch in batches:
        tokens, offsets = batch.tokens, batch.offsets.tolist()
        for i, number in enumerate(batch.numbers.tolist()):
            yield number, tokens[offsets[i] : offsets[i + 1]]


def _best_fit(
    packing: Packing, batches: Iterable[TokenBatch], skip_rows: int, dropped: Dropped
) -> Iterator[tuple[Row, ResumePoint]]:
    window: list[tuple[int, NDArray[np.integer]]] = []
    documents = _documents(batches)
    while True:
        window.clear()
        for item in documents:
            window.append(item)
            if len(window) == packing.window:
                break
        if not window:
            return
        first, following = window[0][0], window[-1][0] + 1
        rows = _window_rows(packing, window, dropped if skip_rows == 0 else _ignore)
        for given, row in enumerate(rows, start=1):
            if given <= skip_rows:
                continue
            done = given == len(rows)
            yield row, ResumePoint(following, 0) if done else ResumePoint(first, given)
        skip_rows = 0
        if len(window) < packing.window:
            return


def _ignore(number: int, tokens: int) -> None:
    """A resumed window's long documents were counted before the checkpoint."""


def _window_rows(
    packing: Packing, window: list[tuple[int, NDArray[np.integer]]], dropped: Dropped
) -> list[Row]:
    """Best-fit decreasing over one window: rows of whole long-document chunks first, then
    the bins in the order they were opened, each with its pieces in document order."""
    size = packing.seq_len
    chunks: list[Row] = []
    items: list[tuple[int, int, Piece]] = []  # (-length, order, piece)
    for order, (number, document) in enumerate(window):
        length = int(document.size)
        if length > size and packing.long_docs == "drop":
            dropped(number, length)
            continue
        whole = length // size if length > size else 0
        for k in range(whole):
            end = (k + 1) * size
            following = int(document[end]) if end < length else IGNORE_INDEX
            chunks.append([Piece(document[k * size : end], following)])
        rest = length - whole * size
        if rest:
            items.append((-rest, order, Piece(document[whole * size :], IGNORE_INDEX)))
    items.sort(key=lambda item: (item[0], item[1]))
    bins: list[list[tuple[int, Piece]]] = []
    room: list[tuple[int, int]] = []  # (room left, bin number), sorted
    for negative, order, piece in items:
        at = bisect.bisect_left(room, (-negative, -1))
        if at == len(room):
            bins.append([(order, piece)])
            bisect.insort(room, (size + negative, len(bins) - 1))
            continue
        left, number = room.pop(at)
        bins[number].append((order, piece))
        bisect.insort(room, (left + negative, number))
    return chunks + [[piece for _, piece in sorted(b, key=lambda x: x[0])] for b in bins]
