"""Packing: concatenate-and-split keeps every token in order; best-fit keeps documents
whole with little padding; rows' labels, positions and boundaries; long documents;
resuming a unit from any row's resume point gives the rows that followed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.text.documents import TokenBatch
from conveyor.text.packing import IGNORE_INDEX, Packing, ResumePoint, pack
from conveyor.text.rows import build_row, collate_packed


def batches(docs: list[np.ndarray], start: int = 0, size: int = 7) -> list[TokenBatch]:
    out = []
    for first in range(start, len(docs), size):
        part = docs[first : first + size]
        offsets = np.concatenate(([0], np.cumsum([len(d) for d in part]))).astype(np.int64)
        tokens = np.concatenate(part) if part else np.zeros(0, np.int64)
        out.append(TokenBatch(np.arange(first, first + len(part)), tokens, offsets))
    return out


START = ResumePoint(0, 0)


def rows_of(packing: Packing, docs: list[np.ndarray], point: ResumePoint = START):
    dropped: list[tuple[int, int]] = []
    rows = list(
        pack(packing, batches(docs, point.document), point, lambda n, t: dropped.append((n, t)))
    )
    return rows, dropped


lengths = st.lists(st.integers(1, 40), min_size=1, max_size=60)


def make(lengths_: list[int]) -> list[np.ndarray]:
    start = np.cumsum([0, *lengths_])
    return [np.arange(a, b) + 1 for a, b in itertools.pairwise(start)]


@settings(max_examples=60, deadline=None)
@given(lengths_=lengths, seq_len=st.integers(2, 33))
def test_concat_keeps_every_token_in_order(lengths_: list[int], seq_len: int) -> None:
    docs = make(lengths_)
    rows, _ = rows_of(Packing(seq_len), docs)
    flat = [t for row, _ in rows for piece in row for t in piece.tokens.tolist()]
    assert flat == np.concatenate(docs).tolist()
    assert all(sum(p.tokens.size for p in row) == seq_len for row, _ in rows[:-1])


@settings(max_examples=60, deadline=None)
@given(
    lengths_=lengths,
    seq_len=st.integers(2, 33),
    method=st.sampled_from(["concat", "best_fit"]),
    window=st.integers(1, 9),
)
def test_resuming_at_any_row_gives_the_rows_that_followed(
    lengths_: list[int], seq_len: int, method: str, window: int
) -> None:
    docs = make(lengths_)
    packing = Packing(seq_len, method=method, window=window)  # type: ignore[arg-type]
    rows, _ = rows_of(packing, docs)
    as_lists = [[[*p.tokens.tolist(), p.following] for p in row] for row, _ in rows]
    for k, (_, after) in enumerate(rows):
        resumed, _ = rows_of(packing, docs, after)
        assert [[[*p.tokens.tolist(), p.following] for p in row] for row, _ in resumed] == (
            as_lists[k + 1 :]
        )


@settings(max_examples=60, deadline=None)
@given(lengths_=lengths, seq_len=st.integers(2, 33), window=st.integers(1, 20))
def test_best_fit_keeps_documents_whole_and_each_token_once(
    lengths_: list[int], seq_len: int, window: int
) -> None:
    docs = make(lengths_)
    rows, _ = rows_of(Packing(seq_len, method="best_fit", window=window), docs)
    pieces = [p for row, _ in rows for p in row]
    assert all(sum(p.tokens.size for p in row) <= seq_len for row, _ in rows)
    assert sorted(t for p in pieces for t in p.tokens.tolist()) == np.concatenate(docs).tolist()
    short = {int(d[0]) for d in docs if len(d) <= seq_len}
    whole = {int(p.tokens[0]) for p in pieces if p.tokens.size and int(p.tokens[0]) in short}
    assert whole == short  # a document that fits is never cut
    for p in pieces:
        if int(p.tokens[0]) in short:
            assert p.following == IGNORE_INDEX


def test_best_fit_padding_on_log_normal_lengths_is_under_one_percent() -> None:
    rng = np.random.default_rng(0)
    lengths_ = np.clip(rng.lognormal(6.0, 1.0, 8192).astype(int), 1, 4096).tolist()
    rows, _ = rows_of(Packing(4096, method="best_fit", window=1024), make(lengths_))
    real = sum(p.tokens.size for row, _ in rows for p in row)
    padding = len(rows) * 4096 - real
    assert padding / (len(rows) * 4096) <= 0.01


def test_long_documents_split_or_dropped_and_counted() -> None:
    docs = make([5, 30, 3])
    rows, dropped = rows_of(Packing(8, method="best_fit", long_docs="drop"), docs)
    assert dropped == [(1, 30)]
    assert sorted(t for row, _ in rows for p in row for t in p.tokens.tolist()) == (
        docs[0].tolist() + docs[2].tolist()
    )
    rows, dropped = rows_of(Packing(8, method="best_fit"), docs)
    assert not dropped
    chunks = [row for row, _ in rows if len(row) == 1 and row[0].tokens.size == 8]
    assert [c[0].following for c in chunks][:3] == [
        int(docs[1][8]),
        int(docs[1][16]),
        int(docs[1][24]),
    ]
    rows, dropped = rows_of(Packing(8, long_docs="drop"), docs)
    assert dropped == [(1, 30)]


def test_row_arrays_labels_positions_and_boundaries() -> None:
    docs = [np.array([1, 2, 3]), np.array([4, 5, 6, 7, 8])]
    rows, _ = rows_of(Packing(6), docs)
    row = build_row(rows[0][0], Packing(6))
    assert row["input_ids"].tolist() == [1, 2, 3, 4, 5, 6]
    assert row["labels"].tolist() == [2, 3, IGNORE_INDEX, 5, 6, 7]  # 7: the document goes on
    assert row["position_ids"].tolist() == [0, 1, 2, 0, 1, 2]
    assert row["cu_seqlens"].tolist() == [0, 3, 6]
    last = build_row(rows[1][0], Packing(6, pad_id=9))
    assert last["input_ids"].tolist() == [7, 8, 9, 9, 9, 9]
    assert last["labels"].tolist() == [8, IGNORE_INDEX] + [IGNORE_INDEX] * 4
    assert last["position_ids"].tolist() == [0, 1, 0, 1, 2, 3]
    assert last["cu_seqlens"].tolist() == [0, 2, 6]  # the padding is a segment of its own
    unshifted = build_row(rows[0][0], Packing(6, labels="unshifted"))
    assert unshifted["labels"].tolist() == [IGNORE_INDEX, 2, 3, IGNORE_INDEX, 5, 6]
    batch = collate_packed([row, last])
    assert (
        batch["input_ids"].shape == (2, 6) and batch["input_ids"].dtype.is_floating_point is False
    )
    assert batch["cu_seqlens"].tolist() == [0, 3, 6, 8, 12]
    assert batch["max_seqlen"] == 4


def test_packing_options_are_checked() -> None:
    with pytest.raises(ValueError, match="seq_len"):
        Packing(1)
    with pytest.raises(ValueError, match="method"):
        Packing(8, method="greedy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="long_docs"):
        Packing(8, long_docs="truncate")  # type: ignore[arg-type]
