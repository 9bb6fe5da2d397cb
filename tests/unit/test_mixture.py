"""Mixture: sources by name, stop modes, set_weights, counts, exact resume, replicas."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor import IterableDataset, Mixture
from conveyor.datapipes.iter import IterableWrapper
from conveyor.datapipes.map import SequenceWrapper

FEW = settings(max_examples=40, deadline=None)
MODES = ["first_exhausted", "all_exhausted", "never"]
LIMIT = 3000  # samples taken from a mixture that may not end


class Stream(IterableDataset[Any]):
    """A re-iterable stream without state: resuming it replays and drops."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)


def make_sources(sizes: list[int], kinds: list[str]) -> dict[str, Any]:
    """Source ``i`` holds ``(i, 0) ... (i, size - 1)``: a list, a stream or a DataPipe."""
    sources: dict[str, Any] = {}
    for number, (size, kind) in enumerate(zip(sizes, kinds, strict=False)):
        items = [(number, j) for j in range(size)]
        sources[f"s{number}"] = {
            "list": lambda items=items: items,
            "stream": lambda items=items: Stream(items),
            "pipe": lambda items=items: IterableWrapper(items),  # stateful stream
            "mappipe": lambda items=items: SequenceWrapper(items),
        }[kind]()
    return sources


def take(mixture: Mixture, limit: int = LIMIT) -> list[Any]:
    return list(itertools.islice(mixture, limit))


def test_sources_follow_the_schedule_and_are_read_as_permutations() -> None:
    mixture = Mixture(make_sources([40, 60], ["list", "list"]), {"s0": 2, "s1": 3}, seed=1)
    out = take(mixture)
    assert [s for s, _ in out] == [mixture.names.index(mixture.source_at(p)) for p in range(100)]
    assert sorted(out) == [(0, j) for j in range(40)] + [(1, j) for j in range(60)]
    assert [j for s, j in out if s == 0] != list(range(40))  # shuffled
    assert mixture.counts() == {"s0": 40, "s1": 60}
    ordered = Mixture(make_sources([40, 60], ["list", "list"]), [2, 3], shuffle=False)
    assert [j for s, j in take(ordered) if s == 0] == list(range(40))


def test_first_exhausted_stops_where_the_first_source_runs_out() -> None:
    mixture = Mixture(make_sources([10, 100], ["list", "stream"]), [1, 1])
    out = take(mixture)
    assert Counter(s for s, _ in out) == {0: 10, 1: 10}  # s0's 11th would come next
    assert mixture.counts() == {"s0": 10, "s1": 10}


def test_all_exhausted_cycles_until_every_source_ran_out_once() -> None:
    mixture = Mixture(make_sources([5, 30], ["list", "stream"]), [1, 1], stop_on="all_exhausted")
    out = take(mixture)
    counts = Counter(s for s, _ in out)
    # s1 (odd positions) runs out at position 61; s0 took the 31 even positions before it,
    # cycling through 6 whole passes and starting a 7th to keep the proportions.
    assert counts[1] == 30 and counts[0] == 31
    assert {j for s, j in out if s == 0} == set(range(5))
    passes = [[j for s, j in out if s == 0][i : i + 5] for i in range(0, 30, 5)]
    assert all(sorted(p) == list(range(5)) for p in passes)  # every pass a permutation


def test_never_cycles_forever() -> None:
    mixture = Mixture(make_sources([3, 4], ["stream", "pipe"]), [1, 3], stop_on="never")
    out = take(mixture, 800)
    assert len(out) == 800
    assert Counter(s for s, _ in out) == {0: 200, 1: 600}


def test_a_generator_cannot_be_cycled_and_says_so() -> None:
    mixture = Mixture({"a": (i for i in range(3)), "b": [1, 2]}, [1, 1], stop_on="never")
    with pytest.raises(ValueError, match="'a' yielded nothing on a new pass"):
        take(mixture)


@FEW
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    weights=st.lists(st.integers(0, 5), min_size=4, max_size=4),
    mode=st.sampled_from(MODES),
)
def test_streams_and_map_style_sources_give_the_same_mixture(
    sizes: list[int], weights: list[int], mode: str
) -> None:
    weights = weights[: len(sizes)]
    if not any(weights):
        weights[0] = 1
    outputs = []
    for kind in ("list", "stream", "pipe", "mappipe"):
        sources = make_sources(sizes, [kind] * len(sizes))
        outputs.append(take(Mixture(sources, weights, stop_on=mode, shuffle=False), 500))  # type: ignore[arg-type]
    assert all(out == outputs[0] for out in outputs[1:])


@FEW
@given(
    sizes=st.lists(st.integers(1, 40), min_size=2, max_size=4),
    kinds=st.lists(st.sampled_from(["list", "stream", "pipe"]), min_size=4, max_size=4),
    mode=st.sampled_from(MODES),
    checkpoint=st.integers(0, 300),
    changes=st.lists(
        st.tuples(st.integers(0, 400), st.lists(st.integers(0, 4), min_size=4, max_size=4)),
        max_size=3,
    ),
)
def test_resume_at_any_position_continues_exactly(
    sizes: list[int], kinds: list[str], mode: str, checkpoint: int, changes: list[Any]
) -> None:
    def fresh() -> Mixture:
        return Mixture(make_sources(sizes, kinds), [1] * len(sizes), seed=3, stop_on=mode)  # type: ignore[arg-type]

    plan = sorted((at, w[: len(sizes)]) for at, w in changes if any(w[: len(sizes)]))

    def run(mixture: Mixture, start: int, stop: int) -> list[Any]:
        out = []
        iterator = iter(mixture)
        for position in range(start, stop):
            for at, weights in plan:
                if at == position:
                    mixture.set_weights(weights)
            try:
                out.append(next(iterator))
            except StopIteration:
                break
        return out

    whole = run(fresh(), 0, 500)
    first = fresh()
    head = run(first, 0, checkpoint)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = fresh()
    resumed.load_state_dict(state)
    assert resumed.counts() == first.counts()
    start = min(checkpoint, len(whole))
    tail = run(resumed, start, 500)
    assert head + tail == whole


def test_set_weights_applies_from_the_next_sample_and_counts_follow() -> None:
    mixture = Mixture(make_sources([1000, 1000], ["list", "stream"]), [1, 1], stop_on="never")
    iterator = iter(mixture)
    head = [next(iterator) for _ in range(100)]
    mixture.set_weights({"s0": 9, "s1": 1})
    tail = [next(iterator) for _ in range(100)]
    assert Counter(s for s, _ in head) == {0: 50, 1: 50}
    assert Counter(s for s, _ in tail) == {0: 90, 1: 10}
    assert mixture.counts() == {"s0": 140, "s1": 60}
    assert mixture.counts(position=110) == {"s0": 59, "s1": 51}
    with pytest.raises(ValueError, match="already produced"):
        mixture.set_weights([1, 1], position=150)
    mixture.set_weights([1, 0], position=300)  # a future position: applies there
    later = [next(iterator) for _ in range(200)]
    assert Counter(s for s, _ in later[:100]) == {0: 90, 1: 10}
    assert Counter(s for s, _ in later[100:]) == {0: 100}


def test_weights_must_name_every_source() -> None:
    sources = make_sources([3, 3], ["list", "list"])
    with pytest.raises(ValueError, match=r"missing \['s1'\]"):
        Mixture(sources, {"s0": 1})
    with pytest.raises(ValueError, match=r"unknown \['x'\]"):
        Mixture(sources, {"s0": 1, "s1": 1, "x": 1})
    with pytest.raises(ValueError, match="one weight per source"):
        Mixture(sources, [1])
    with pytest.raises(ValueError, match="stop_on"):
        Mixture(sources, [1, 1], stop_on="sometimes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="map-style dataset"):
        Mixture({"a": 3}, [1])


def test_state_is_small_for_a_thousand_sources() -> None:
    sources = {f"source-{i:04d}": [i] * (i + 1) for i in range(1000)}
    weights = np.random.default_rng(0).random(1000).tolist()
    mixture = Mixture(sources, weights, stop_on="never")
    take(mixture, 20_000)
    state = mixture.state_dict()
    assert len(json.dumps(state)) <= 1024
    resumed = Mixture(sources, weights, stop_on="never")
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert resumed.counts() == mixture.counts() and sum(mixture.counts().values()) == 20_000


def test_state_records_weight_changes_compactly() -> None:
    sources = {f"s{i}": list(range(100)) for i in range(10)}
    mixture = Mixture(sources, [1] * 10, stop_on="never")
    iterator = iter(mixture)
    for step in range(20):  # a curriculum switching between two mixtures
        for _ in range(50):
            next(iterator)
        mixture.set_weights([1] * 10 if step % 2 else [5, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    state = mixture.state_dict()
    assert len(state["vectors"]) == 2 and len(state["changes"]) == 21
    assert len(json.dumps(state)) <= 1024


def test_a_checkpoint_of_another_mixture_is_refused() -> None:
    mixture = Mixture(make_sources([5, 6], ["list", "stream"]), [1, 2])
    state = mixture.state_dict()
    for other, field in [
        (Mixture(make_sources([6, 6], ["list", "stream"]), [1, 2]), "sources"),  # length
        (Mixture(make_sources([5, 6], ["stream", "stream"]), [1, 2]), "sources"),
        (Mixture(make_sources([5, 6], ["list", "stream"]), [1, 3]), "weights"),
        (Mixture(make_sources([5, 6], ["list", "stream"]), [1, 2], stop_on="never"), "stop_on"),
    ]:
        with pytest.raises(ValueError, match=f"another '{field}'"):
            other.load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        mixture.load_state_dict({**state, "version": 7})


@FEW
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=3),
    kinds=st.lists(st.sampled_from(["list", "stream"]), min_size=3, max_size=3),
    mode=st.sampled_from(MODES),
    num_workers=st.integers(1, 3),
    world_size=st.integers(1, 3),
    batch_size=st.integers(1, 7),
)
def test_replicas_together_produce_the_single_process_sequence(
    sizes: list[int],
    kinds: list[str],
    mode: str,
    num_workers: int,
    world_size: int,
    batch_size: int,
) -> None:
    weights = list(range(1, len(sizes) + 1))
    single = take(Mixture(make_sources(sizes, kinds), weights, stop_on=mode, seed=2), 400)  # type: ignore[arg-type]
    batches: dict[int, list[Any]] = {}
    for rank, worker in itertools.product(range(world_size), range(num_workers)):
        replica = Mixture(make_sources(sizes, kinds), weights, stop_on=mode, seed=2)  # type: ignore[arg-type]
        replica.configure(
            worker_id=worker,
            num_workers=num_workers,
            rank=rank,
            world_size=world_size,
            batch_size=batch_size,
        )
        out = iter(take(replica, 400))
        for j in itertools.count(worker, num_workers):
            batch = list(itertools.islice(out, batch_size))
            if not batch:
                break
            batches[j * world_size + rank] = batch
    merged = [sample for g in sorted(batches) for sample in batches[g]]
    assert merged[: len(single)] == single
