"""`PackedText` through the DataLoader: real worker processes and threads, ranks simulated
in one process (each rank's loader sees its own ``world_and_rank``; forked workers inherit
it). A checkpoint of W ranks x N workers, merged, resumes on W' x N' (any kind) with every
remaining row exactly once and every row identical; set_weights reaches the workers; bad
data is counted in the main process with file and row, or raised."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import conveyor.text.stream as stream_module
from conveyor import DataLoader, merge_checkpoints
from conveyor.engine.loop import base_iterator
from conveyor.formats.errors import BadSampleWarning, SampleError
from conveyor.text import (
    JsonlDocuments,
    PackedText,
    Packing,
    TokenFiles,
    TokenFileWriter,
    Tokenizer,
)

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
SEQ = 12


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("packed")
    rng = np.random.default_rng(3)
    out = {}
    for name, (low, count) in {"web": (1, 90), "code": (1000, 60)}.items():
        prefix = str(root / name)
        with TokenFileWriter(prefix) as writer:
            for _ in range(count):
                writer.add(rng.integers(low, low + 900, int(rng.integers(1, 30))))
        out[name] = prefix
    return out


def dataset(corpus: dict[str, str], method: str = "concat") -> PackedText:
    # small units: more of them (~70 and ~45) than the 32 consumers of 8 ranks x 4 workers,
    # so every rank has rows for the batches it takes (a rank whose share is empty ends
    # its epoch, and a finished rank's checkpoint cannot be merged with the others')
    sources = {name: TokenFiles(prefix, unit_tokens=24) for name, prefix in corpus.items()}
    packing = Packing(SEQ, method=method, window=6, boundaries=False)  # type: ignore[arg-type]
    return PackedText(sources, packing, weights={"web": 0.6, "code": 0.4}, shuffle=True, seed=2)


def keys(batch: dict[str, Any]) -> list[tuple[int, ...]]:
    ids, labels, positions = batch["input_ids"], batch["labels"], batch["position_ids"]
    return [
        tuple(ids[i].tolist() + labels[i].tolist() + positions[i].tolist())
        for i in range(ids.shape[0])
    ]


def as_rank(monkeypatch: pytest.MonkeyPatch, world: int, rank: int) -> None:
    monkeypatch.setattr(stream_module, "world_and_rank", lambda: (world, rank))
    monkeypatch.setattr(base_iterator, "world_and_rank", lambda: (world, rank))


def run_ranks(corpus, method, topology, state, batches, monkeypatch):  # type: ignore[no-untyped-def]
    """Every rank of ``(world, workers, kind)`` takes ``batches`` batches (None: to the
    end) after loading ``state``; returns the rows and the merged checkpoint."""
    world, workers, kind = topology
    rows: list[tuple[int, ...]] = []
    states = []
    for rank in range(world):
        as_rank(monkeypatch, world, rank)
        extra = {"worker_type": kind} if workers else {}
        loader = DataLoader(dataset(corpus, method), batch_size=2, num_workers=workers, **extra)
        if state is not None:
            loader.load_state_dict(state)
        iterator = iter(loader)
        for batch in itertools.islice(iterator, batches):
            rows += keys(batch)
        states.append(loader.state_dict())
        del iterator
    if batches is None:
        return rows, None
    merged = merge_checkpoints(states)
    assert json.loads(json.dumps(merged["elastic"])) == merged["elastic"]  # plain data
    return rows, merged


def full_rows(corpus: dict[str, str], method: str) -> Counter[tuple[int, ...]]:
    loader = DataLoader(dataset(corpus, method), batch_size=2)
    return Counter(key for batch in loader for key in keys(batch))


topologies = st.tuples(st.integers(1, 8), st.integers(0, 4), st.sampled_from(["process", "thread"]))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    first=topologies,
    second=topologies,
    method=st.sampled_from(["concat", "best_fit"]),
    batches=st.integers(1, 5),
)
@example(first=(8, 4, "process"), second=(3, 2, "thread"), method="concat", batches=3)
@example(first=(1, 0, "process"), second=(8, 4, "thread"), method="best_fit", batches=5)
@example(first=(5, 3, "thread"), second=(7, 1, "process"), method="best_fit", batches=2)
def test_checkpoint_of_any_topology_resumes_on_any_other(
    corpus: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    first: tuple[int, int, str],
    second: tuple[int, int, str],
    method: str,
    batches: int,
) -> None:
    as_rank(monkeypatch, 1, 0)  # hypothesis reuses the monkeypatch between examples
    expected = full_rows(corpus, method)
    got, state = run_ranks(corpus, method, first, None, batches, monkeypatch)
    rest, _ = run_ranks(corpus, method, second, state, None, monkeypatch)
    assert Counter(got + rest) == expected


def test_set_weights_reaches_process_workers_deterministically(corpus: dict[str, str]) -> None:
    def run() -> list[str]:
        loader = DataLoader(dataset(corpus), batch_size=2, num_workers=2)
        iterator = iter(loader)
        seen = [b for b in itertools.islice(iterator, 3)]
        loader.dataset.set_weights({"web": 0.0, "code": 1.0})
        seen += list(itertools.islice(iterator, 8))
        del iterator
        return [
            "web" if int(b["input_ids"][i].max()) < 1000 else "code" for b in seen for i in range(2)
        ]

    first = run()
    assert first == run()
    # the change applies from each worker's first batch not yet asked for: 3 steps + 2 x 2
    # batches in flight (prefetch_factor 2), 2 rows each
    assert set(first[(3 + 4) * 2 :]) == {"code"}
    assert "web" in first[: 3 * 2]


def write_lines(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def text_dataset(url: str, on_error: str) -> PackedText:
    def chars(texts: list[str]) -> list[list[int]]:
        return [[ord(c) for c in text] for text in texts]

    return PackedText(
        JsonlDocuments(url),
        Packing(8, boundaries=False),
        tokenizer=Tokenizer(chars, eos_id=0),
        on_error=on_error,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_lines_counted_in_the_main_process_with_file_and_line(
    tmp_path: Path, workers: int
) -> None:
    url = write_lines(
        tmp_path / "a.jsonl",
        ['{"text": "hello world"}', "{oops", '{"text": ""}', '{"text": "again"}'],
    )
    loader = DataLoader(text_dataset(url, "skip"), batch_size=2, num_workers=workers)
    with pytest.warns(BadSampleWarning, match=r"skipped 2 samples.*a.jsonl.*line 1"):
        rows = [r for batch in loader for r in batch["input_ids"].tolist()]
    assert sum(len([t for t in r if t]) for r in rows) == len("hello world") + len("again")
    assert loader.stats().skipped == 2


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_lines_raise_under_on_error_raise(tmp_path: Path, workers: int) -> None:
    url = write_lines(tmp_path / "a.jsonl", ['{"text": "hello"}', "{oops"])
    loader = DataLoader(text_dataset(url, "raise"), batch_size=2, num_workers=workers)
    with pytest.raises(SampleError, match=r"not JSON.*a.jsonl.*line 1"):
        list(loader)


@pytest.mark.parametrize(
    "topology", [(1, 0, "process"), (1, 2, "process"), (2, 3, "thread"), (3, 1, "process")]
)
@pytest.mark.parametrize("method", ["concat", "best_fit"])
def test_same_topology_resumes_the_same_rows_in_the_same_order(
    corpus: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    topology: tuple[int, int, str],
    method: str,
) -> None:
    """Each worker continues its own consumer mid-unit (not the merged progress): the
    rows after the checkpoint are the uninterrupted run's, batch for batch."""
    world, workers, kind = topology
    extra = {"worker_type": kind} if workers else {}
    for rank in range(world):
        as_rank(monkeypatch, world, rank)
        whole = [
            keys(b)
            for b in DataLoader(dataset(corpus, method), batch_size=2, num_workers=workers, **extra)
        ]
        loader = DataLoader(dataset(corpus, method), batch_size=2, num_workers=workers, **extra)
        iterator = iter(loader)
        head = [keys(b) for b in itertools.islice(iterator, 3)]
        state = loader.state_dict()
        del iterator
        resumed = DataLoader(dataset(corpus, method), batch_size=2, num_workers=workers, **extra)
        resumed.load_state_dict(state)
        assert head + [keys(b) for b in resumed] == whole
