"""`PackedText` without a loader: consumers (ranks x workers) simulated in one process.

Every row is the same whoever packs it; checkpoints of any split, merged, resume on any
other split and deliver every remaining row exactly once (hypothesis, mid-document and
mid-row included); the mixture holds token weights within each consumer; `set_weights`
and sources that run out; the state is plain data and small."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from text_data import documents, token_file

import conveyor.text.stream as stream_module
from conveyor.state.stream_set import merge_stream_set
from conveyor.text import PackedText, Packing, TokenFiles

SEQ = 16
VOCABS = {"web": (1, 1000), "code": (1000, 2000), "books": (2000, 3000)}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("corpus")
    out = {}
    for number, (name, (low, high)) in enumerate(VOCABS.items()):
        docs = [
            d % (high - low) + low for d in documents(120 + 40 * number, seed=number, longest=40)
        ]
        out[name] = token_file(root / name, docs)
    return out


def make(
    corpus: dict[str, str],
    method: str = "concat",
    names: tuple[str, ...] = ("web", "code", "books"),
    weights: Any = None,
) -> PackedText:
    sources = {name: TokenFiles(corpus[name], unit_tokens=200) for name in names}
    packing = Packing(SEQ, method=method, window=8, boundaries=False)  # type: ignore[arg-type]
    return PackedText(sources, packing, weights=weights, shuffle=True, seed=5)


def as_key(row: dict[str, np.ndarray]) -> tuple[int, ...]:
    return tuple(row["input_ids"].tolist() + row["labels"].tolist() + row["position_ids"].tolist())


def consume(
    dataset: PackedText, slot: tuple[int, int], take: int | None, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[tuple[int, ...]], dict[str, Any]]:
    monkeypatch.setattr(stream_module, "_slot", lambda: slot)
    iterator: Iterator[dict[str, np.ndarray]] = iter(dataset)
    rows = [as_key(row) for row in itertools.islice(iterator, take)]
    return rows, dataset.state_dict()


def split_run(
    corpus: dict[str, str],
    method: str,
    state: Any,
    consumers: int,
    takes: list[int | None],
    monkeypatch: pytest.MonkeyPatch,
):
    rows: list[tuple[int, ...]] = []
    states = []
    for consumer in range(consumers):
        dataset = make(corpus, method)
        if state is not None:
            dataset.load_state_dict(state)
        got, saved = consume(
            dataset, (consumers, consumer), takes[consumer % len(takes)], monkeypatch
        )
        rows += got
        states.append(json.loads(json.dumps(saved)))  # plain data only
    return rows, merge_stream_set(states)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=st.sampled_from(["concat", "best_fit"]),
    first=st.integers(1, 32),
    second=st.integers(1, 32),
    takes=st.lists(st.integers(0, 9), min_size=1, max_size=4),
    takes_2=st.lists(st.integers(0, 9), min_size=1, max_size=4),
)
def test_any_split_resumes_on_any_other_with_every_row_once(
    corpus: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    first: int,
    second: int,
    takes: list[int],
    takes_2: list[int],
) -> None:
    full, _ = consume(make(corpus, method), (1, 0), None, monkeypatch)
    got, merged = split_run(corpus, method, None, first, takes, monkeypatch)  # type: ignore[arg-type]
    more, merged = split_run(corpus, method, merged, second, takes_2, monkeypatch)  # type: ignore[arg-type]
    rest, _ = split_run(corpus, method, merged, 3, [None], monkeypatch)
    assert Counter(got + more + rest) == Counter(full)


def test_same_consumer_resumes_in_the_same_order(
    corpus: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    full, _ = consume(make(corpus), (3, 1), None, monkeypatch)
    head, state = consume(make(corpus), (3, 1), 11, monkeypatch)
    resumed = make(corpus)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    tail, _ = consume(resumed, (3, 1), None, monkeypatch)
    assert head + tail == full
    with pytest.raises(ValueError, match="consumer 1 of 3"):
        other = make(corpus)
        other.load_state_dict(state)
        consume(other, (2, 1), 1, monkeypatch)


def source_of(key: tuple[int, ...]) -> str:
    token = max(key[:SEQ])
    return next(name for name, (low, high) in VOCABS.items() if low <= token < high)


def test_token_weights_hold_in_every_window(
    corpus: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = make(corpus, weights={"web": 0.5, "code": 0.25, "books": 0.25})
    rows, _ = consume(dataset, (1, 0), 200, monkeypatch)
    names = [source_of(r) for r in rows]
    for start in range(0, 160, 7):
        window = Counter(names[start : start + 40])
        assert abs(window["web"] - 20) <= 2 and abs(window["code"] - 10) <= 2


def test_set_weights_mid_run_and_sources_that_run_out(
    corpus: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = make(corpus, weights=[1, 1, 0])
    monkeypatch.setattr(stream_module, "_slot", lambda: (1, 0))
    iterator = iter(dataset)
    head = [source_of(as_key(r)) for r in itertools.islice(iterator, 20)]
    assert set(head) == {"web", "code"}
    dataset.set_weights({"web": 0, "code": 0, "books": 1})
    state = dataset.state_dict()
    after = [source_of(as_key(r)) for r in itertools.islice(iterator, 20)]
    assert set(after) == {"books"}
    resumed = make(corpus, weights=[1, 1, 0])
    resumed.load_state_dict(state)  # the change is in the checkpoint
    assert [source_of(as_key(r)) for r in itertools.islice(iter(resumed), 20)] == after
    rest = [source_of(as_key(r)) for r in iterator]  # books runs out: the run ends
    assert set(rest) == {"books"}


def test_first_exhausted_stops_at_the_first_source_that_runs_out(
    corpus: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = {name: TokenFiles(corpus[name], unit_tokens=200) for name in ("web", "code")}
    small = PackedText(
        sources, Packing(SEQ, boundaries=False), weights=[1, 9], stop_on="first_exhausted"
    )
    rows, _ = consume(small, (1, 0), None, monkeypatch)
    names = Counter(source_of(r) for r in rows)
    web_rows = sum(1 for _ in consume(make(corpus, names=("web",)), (1, 0), None, monkeypatch)[0])
    assert names["code"] < 9 * names["web"] + 9 and names["web"] < web_rows


def test_state_is_plain_and_small_for_64_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = token_file(tmp_path / "one", documents(400, seed=9))
    sources = {f"source-{i:02d}": TokenFiles(prefix, unit_tokens=300) for i in range(64)}
    dataset = PackedText(sources, Packing(SEQ, boundaries=False), weights=list(range(1, 65)))
    monkeypatch.setattr(stream_module, "_slot", lambda: (1, 0))
    iterator = iter(dataset)
    for _ in itertools.islice(iterator, 500):
        pass
    dataset.set_weights(list(range(64, 0, -1)))
    for _ in itertools.islice(iterator, 500):
        pass
    state = dataset.state_dict()
    text = json.dumps(state)
    assert json.loads(text) == state
    assert len(text) <= 4096, len(text)


def test_a_checkpoint_of_other_sources_is_refused(
    corpus: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, state = consume(make(corpus), (1, 0), 3, monkeypatch)
    with pytest.raises(ValueError, match="other sources or settings"):
        make(corpus, names=("web", "code")).load_state_dict(state)
    with pytest.raises(ValueError, match="expects the dict"):
        make(corpus).load_state_dict({"position": 3})
