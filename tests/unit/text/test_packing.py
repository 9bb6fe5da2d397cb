"""Packing: concatenate-and-split keeps every token in order (checked against a
per-token reference); best-fit keeps documents whole with little padding; rows' labels,
positions and boundaries; long documents; resuming a unit from any row's resume point
gives the rows that followed."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.text.documents import TokenBatch
from conveyor.text.packing import IGNORE_INDEX, Packing, ResumePoint, pack
from conveyor.text.rows import collate_packed

START = ResumePoint(0, 0)


def batches(docs: list[np.ndarray], start: int = 0, size: int = 7) -> list[TokenBatch]:
    out = []
    for first in range(start, len(docs), size):
        part = docs[first : first + size]
        offsets = np.concatenate(([0], np.cumsum([len(d) for d in part]))).astype(np.int64)
        out.append(TokenBatch(np.arange(first, first + len(part)), np.concatenate(part), offsets))
    return out


def rows_of(
    packing: Packing, docs: list[np.ndarray], point: ResumePoint = START, size: int = 7
) -> tuple[list[tuple[dict[str, Any], int, ResumePoint]], list[tuple[int, int]]]:
    dropped: list[tuple[int, int]] = []
    got = pack(
        packing, batches(docs, point.document, size), point, lambda n, t: dropped.append((n, t))
    )
    return list(got), dropped


def as_lists(rows: list[tuple[dict[str, Any], int, ResumePoint]]) -> list[list[list[int]]]:
    return [[row[k].tolist() for k in sorted(row)] for row, _, _ in rows]


lengths = st.lists(st.integers(1, 40), min_size=1, max_size=60)


def make(lengths_: list[int]) -> list[np.ndarray]:
    start = np.cumsum([0, *lengths_])
    return [np.arange(a, b) + 1 for a, b in itertools.pairwise(start)]


def reference_concat(docs: list[np.ndarray], size: int) -> list[dict[str, list[int]]]:
    """Token by token: what concatenate-and-split must give."""
    stream = [(int(t), d, i) for d, doc in enumerate(docs) for i, t in enumerate(doc)]
    rows = []
    for a in range(0, len(stream), size):
        part = stream[a : a + size]
        ids = [t for t, _, _ in part] + [0] * (size - len(part))
        labels, positions, bounds = [], [], [0]
        for k, (_, d, i) in enumerate(part):
            following = stream[a + k + 1] if a + k + 1 < len(stream) else None
            labels.append(following[0] if following and following[1] == d else IGNORE_INDEX)
            positions.append(0 if k == 0 or i == 0 else positions[-1] + 1)
            if k and i == 0:
                bounds.append(k)
        bounds.append(len(part))
        if len(part) < size:
            positions += list(range(size - len(part)))
            labels += [IGNORE_INDEX] * (size - len(part))
            bounds.append(size)
        rows.append(
            {"input_ids": ids, "labels": labels, "position_ids": positions, "cu_seqlens": bounds}
        )
    return rows


@settings(max_examples=80, deadline=None)
@given(lengths_=lengths, seq_len=st.integers(2, 33), batch=st.integers(1, 9))
def test_concat_matches_the_per_token_reference(
    lengths_: list[int], seq_len: int, batch: int
) -> None:
    docs = make(lengths_)
    rows, _ = rows_of(Packing(seq_len), docs, size=batch)
    got = [{k: v.tolist() for k, v in row.items()} for row, _, _ in rows]
    assert got == reference_concat(docs, seq_len)
    assert all(tokens == seq_len for _, tokens, _ in rows[:-1])


@settings(max_examples=60, deadline=None)
@given(
    lengths_=lengths,
    seq_len=st.integers(2, 33),
    method=st.sampled_from(["concat", "best_fit"]),
    window=st.integers(1, 9),
    batch=st.integers(1, 9),
)
def test_resuming_at_any_row_gives_the_rows_that_followed(
    lengths_: list[int], seq_len: int, method: str, window: int, batch: int
) -> None:
    docs = make(lengths_)
    packing = Packing(seq_len, method=method, window=window)  # type: ignore[arg-type]
    rows, _ = rows_of(packing, docs, size=batch)
    for k, (_, _, after) in enumerate(rows):
        resumed, _ = rows_of(packing, docs, after, size=batch)
        assert as_lists(resumed) == as_lists(rows)[k + 1 :]


def segments(row: dict[str, Any], tokens: int) -> list[list[int]]:
    bounds = row["cu_seqlens"].tolist()
    ids = row["input_ids"].tolist()
    return [ids[a:b] for a, b in itertools.pairwise(bounds) if a < tokens]


@settings(max_examples=60, deadline=None)
@given(lengths_=lengths, seq_len=st.integers(2, 33), window=st.integers(1, 20))
def test_best_fit_keeps_documents_whole_and_each_token_once(
    lengths_: list[int], seq_len: int, window: int
) -> None:
    docs = make(lengths_)
    rows, _ = rows_of(Packing(seq_len, method="best_fit", window=window), docs)
    assert all(tokens <= seq_len for _, tokens, _ in rows)
    pieces = [s for row, tokens, _ in rows for s in segments(row, tokens)]
    assert sorted(t for p in pieces for t in p) == np.concatenate(docs).tolist()
    short = [d.tolist() for d in docs if len(d) <= seq_len]
    assert all(doc in pieces for doc in short)  # a document that fits is never cut
    for row, tokens, _ in rows:
        ends = [b - 1 for b in row["cu_seqlens"].tolist()[1:] if b <= tokens]
        assert all(
            row["labels"][e] == IGNORE_INDEX or len(segments(row, tokens)) == 1 for e in ends
        )


def test_best_fit_padding_on_log_normal_lengths_is_under_one_percent() -> None:
    rng = np.random.default_rng(0)
    lengths_ = np.clip(rng.lognormal(6.0, 1.0, 8192).astype(int), 1, 4096).tolist()
    rows, _ = rows_of(Packing(4096, method="best_fit", window=1024), make(lengths_), size=512)
    real = sum(tokens for _, tokens, _ in rows)
    assert (len(rows) * 4096 - real) / (len(rows) * 4096) <= 0.01


def test_long_documents_split_or_dropped_and_counted() -> None:
    docs = make([5, 30, 3])
    rows, dropped = rows_of(Packing(8, method="best_fit", long_docs="drop"), docs)
    assert dropped == [(1, 30)]
    kept = sorted(t for row, tokens, _ in rows for t in row["input_ids"][:tokens].tolist())
    assert kept == docs[0].tolist() + docs[2].tolist()
    rows, dropped = rows_of(Packing(8, method="best_fit"), docs)
    assert not dropped
    chunks = [row for row, tokens, _ in rows if tokens == 8 and len(row["cu_seqlens"]) == 2]
    assert [int(c["labels"][-1]) for c in chunks][:3] == [
        int(docs[1][8]),
        int(docs[1][16]),
        int(docs[1][24]),
    ]
    rows, dropped = rows_of(Packing(8, long_docs="drop"), docs)
    assert dropped == [(1, 30)]
    assert sum(tokens for _, tokens, _ in rows) == 8


def test_row_arrays_labels_positions_and_boundaries() -> None:
    docs = [np.array([1, 2, 3]), np.array([4, 5, 6, 7, 8])]
    rows, _ = rows_of(Packing(6, pad_id=9), docs)
    row, last = rows[0][0], rows[1][0]
    assert row["input_ids"].tolist() == [1, 2, 3, 4, 5, 6]
    assert row["labels"].tolist() == [2, 3, IGNORE_INDEX, 5, 6, 7]  # 7: the document goes on
    assert row["position_ids"].tolist() == [0, 1, 2, 0, 1, 2]
    assert row["cu_seqlens"].tolist() == [0, 3, 6]
    assert last["input_ids"].tolist() == [7, 8, 9, 9, 9, 9]
    assert last["labels"].tolist() == [8, IGNORE_INDEX] + [IGNORE_INDEX] * 4
    assert last["position_ids"].tolist() == [0, 1, 0, 1, 2, 3]
    assert last["cu_seqlens"].tolist() == [0, 2, 6]  # the padding is a segment of its own
    unshifted, _ = rows_of(Packing(6, labels="unshifted"), docs)
    assert unshifted[0][0]["labels"].tolist() == [IGNORE_INDEX, 2, 3, IGNORE_INDEX, 5, 6]
    best, _ = rows_of(Packing(6, method="best_fit", labels="unshifted"), docs)
    assert all(r["labels"][0] == IGNORE_INDEX for r, _, _ in best)
    batch = collate_packed([row, last])
    assert batch["input_ids"].shape == (2, 6) and not batch["input_ids"].dtype.is_floating_point
    assert batch["cu_seqlens"].tolist() == [0, 3, 6, 8, 12]
    assert batch["max_seqlen"] == 4


def test_packing_options_are_checked() -> None:
    with pytest.raises(ValueError, match="seq_len"):
        Packing(1)
    with pytest.raises(ValueError, match="method"):
        Packing(8, method="greedy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="long_docs"):
        Packing(8, long_docs="truncate")  # type: ignore[arg-type]
