"""The shapes packing speaks in: its options (`Packing`), a piece of a document in a row,
and the point where reading a unit resumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

__all__ = ["IGNORE_INDEX", "Packing", "Piece", "ResumePoint"]

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
