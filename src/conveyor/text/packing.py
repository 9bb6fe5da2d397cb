"""Packing documents into rows of ``seq_len`` tokens: concatenate-and-split, or best-fit.

A packer turns a unit's documents (token batches, in order) into rows, each a list of
`Piece`s (a run of one document's tokens and the token that follows it, for the label of
its last position), and says after every row where the *next* row starts, as a
`ResumePoint` of two numbers. Reading the unit again from that point gives exactly the
rows that followed: that is all a checkpoint needs, mid-document and mid-row included.

- ``"concat"``: documents back to back, cut every ``seq_len`` tokens; a unit's last row is
  padded. Resume point: (document, token) where the next row starts.
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
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from conveyor.text.documents import TokenBatch

__all__ = ["IGNORE_INDEX", "Packing", "Piece", "ResumePoint", "pack"]

IGNORE_INDEX = -100
"""The label of positions with nothing to predict (torch's ``CrossEntropyLoss`` default)."""

Method = Literal["concat", "best_fit"]
LongDocs = Literal["split", "drop"]
Labels = Literal["shifted", "unshifted"]


@dataclass(frozen=True)
class Packing:
    """How documents become rows.

    Args:
        seq_len: tokens per row.
        method: ``"concat"`` (concatenate and split: no padding but at a unit's end) or
            ``"best_fit"`` (whole documents, best-fit over a window; some padding).
        window: documents per best-fit window.
        long_docs: documents longer than ``seq_len``: ``"split"`` or ``"drop"`` (counted).
        pad_id: the token id of padding.
        labels: ``"shifted"``: ``labels[i]`` is the token after ``input_ids[i]`` in its
            document (torchtitan, nanoGPT, Megatron: the model does not shift);
            ``"unshifted"``: ``labels`` equal ``input_ids`` with the first position of each
            document ignored (Hugging Face models, which shift inside the loss).
        boundaries: add ``cu_seqlens`` (document boundaries in the row) to each row; the
            rows then need `collate_packed` (their lengths vary).
    """

    seq_len: int
    method: Method = "concat"
    window: int = 1024
    long_docs: LongDocs = "split"
    pad_id: int = 0
    labels: Labels = "shifted"
    boundaries: bool = True

    def __post_init__(self) -> None:
        if self.seq_len < 2:
            raise ValueError(f"Packing seq_len must be >= 2, got {self.seq_len}")
        if self.method not in ("concat", "best_fit"):
            raise ValueError(f"Packing method must be 'concat' or 'best_fit', got {self.method!r}")
        if self.window < 1:
            raise ValueError(f"Packing window must be >= 1 document, got {self.window}")
        if self.long_docs not in ("split", "drop"):
            raise ValueError(f"long_docs must be 'split' or 'drop', got {self.long_docs!r}")
        if self.labels not in ("shifted", "unshifted"):
            raise ValueError(f"labels must be 'shifted' or 'unshifted', got {self.labels!r}")


class Piece(NamedTuple):
    """``tokens`` of one document in a row; ``following``: the document's next token
    (the label of the piece's last position), or `IGNORE_INDEX` at its end."""

    tokens: NDArray[np.integer]
    following: int


class ResumePoint(NamedTuple):
    """Where reading a unit continues: (document, token) for concat, (window's first
    document, rows of the window given) for best-fit."""

    document: int
    within: int


Row = list[Piece]
Dropped = Callable[[int, int], None]  # (document number, its tokens): a long document left out


def pack(
    packing: Packing, batches: Iterable[TokenBatch], start: ResumePoint, dropped: Dropped
) -> Iterator[tuple[Row, ResumePoint]]:
    """The rows of a unit read from ``start`` (its batches begin at ``start.document``),
    each with the point where the next row starts."""
    if packing.method == "concat":
        return _concat(packing, batches, start.within, dropped)
    return _best_fit(packing, batches, start.within, dropped)


def _documents(batches: Iterable[TokenBatch]) -> Iterator[tuple[int, NDArray[np.integer]]]:
    for batch in batches:
        tokens, offsets = batch.tokens, batch.offsets.tolist()
        for i, number in enumerate(batch.numbers.tolist()):
            yield number, tokens[offsets[i] : offsets[i + 1]]


def _concat(
    packing: Packing, batches: Iterable[TokenBatch], skip: int, dropped: Dropped
) -> Iterator[tuple[Row, ResumePoint]]:
    size, drop_long = packing.seq_len, packing.long_docs == "drop"
    row: Row = []
    filled = 0
    last = -1
    for number, document in _documents(batches):
        last = number
        length = int(document.size)
        start, skip = skip, 0  # only the first document resumes inside
        if drop_long and length > size:
            dropped(number, length)
            continue
        while start < length:
            take = min(length - start, size - filled)
            end = start + take
            following = int(document[end]) if end < length else IGNORE_INDEX
            row.append(Piece(document[start:end], following))
            filled += take
            start = end
            if filled == size:
                at = ResumePoint(number, end) if end < length else ResumePoint(number + 1, 0)
                yield row, at
                row, filled = [], 0
    if row:
        yield row, ResumePoint(last + 1, 0)


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
