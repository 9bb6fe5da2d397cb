"""Sharding invariants (Hypothesis): every element exactly once across all shards."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.datapipes import IterDataPipe
from conveyor.datapipes.iter import SHARDING_PRIORITIES, IterableWrapper
from conveyor.graph_settings import apply_random_seed, apply_sharding

FAST = settings(max_examples=40, deadline=None)


def negate(x: int) -> int:
    return -x


def parity(x: int) -> int:
    return x % 2


def plain(n: int) -> tuple[IterDataPipe[Any], list[Any]]:
    return IterableWrapper(range(n)).sharding_filter(), list(range(n))


def forked_then_zipped(n: int) -> tuple[IterDataPipe[Any], list[Any]]:
    a, b = IterableWrapper(range(n)).sharding_filter().fork(2)
    return a.zip(b.map(negate)), [(i, -i) for i in range(n)]


def sharded_then_demuxed(n: int) -> tuple[IterDataPipe[Any], list[Any]]:
    even, odd = IterableWrapper(range(n)).sharding_filter().demux(2, parity)
    return even.concat(odd.map(negate)), [i if i % 2 == 0 else -i for i in range(n)]


def branches_sharded_separately(n: int) -> tuple[IterDataPipe[Any], list[Any]]:
    a, b = IterableWrapper(range(n)).fork(2)
    return a.sharding_filter().zip(b.map(negate).sharding_filter()), [(i, -i) for i in range(n)]


def shuffled_then_sharded(n: int) -> tuple[IterDataPipe[Any], list[Any]]:
    dp = IterableWrapper(range(n)).shuffle(buffer_size=7).sharding_filter().batch(3).unbatch()
    return dp, list(range(n))


GRAPHS: list[Callable[[int], tuple[IterDataPipe[Any], list[Any]]]] = [
    plain,
    forked_then_zipped,
    sharded_then_demuxed,
    branches_sharded_separately,
    shuffled_then_sharded,
]


def run_shards(
    build: Callable[[int], tuple[IterDataPipe[Any], list[Any]]],
    n: int,
    groups: list[tuple[int, int]],
) -> tuple[Counter[Any], list[Any]]:
    """Iterate every combination of shards (one fresh graph each) and count the items."""
    seen: Counter[Any] = Counter()
    expected: list[Any] = []
    total = 1
    for size, _ in groups:
        total *= size
    for combo in range(total):
        dp, expected = build(n)
        rest = combo
        for size, group in groups:
            apply_sharding(dp, size, rest % size, group)
            rest //= size
        apply_random_seed(dp, torch.Generator().manual_seed(11))  # the same seed in every shard
        seen.update(dp)
    return seen, expected


@FAST
@given(
    n=st.integers(0, 60),
    shards=st.integers(1, 6),
    graph=st.sampled_from(GRAPHS),
)
def test_each_element_once_across_shards(
    n: int, shards: int, graph: Callable[[int], tuple[IterDataPipe[Any], list[Any]]]
) -> None:
    seen, expected = run_shards(graph, n, [(shards, SHARDING_PRIORITIES.DEFAULT)])
    assert seen == Counter(expected)


@FAST
@given(
    n=st.integers(0, 50),
    world=st.integers(1, 3),
    workers=st.integers(1, 3),
    graph=st.sampled_from(GRAPHS),
)
def test_each_element_once_across_ranks_and_workers(
    n: int, world: int, workers: int, graph: Callable[[int], tuple[IterDataPipe[Any], list[Any]]]
) -> None:
    groups = [
        (world, SHARDING_PRIORITIES.DISTRIBUTED),
        (workers, SHARDING_PRIORITIES.MULTIPROCESSING),
    ]
    seen, expected = run_shards(graph, n, groups)
    assert seen == Counter(expected)


@FAST
@given(n=st.integers(0, 40), shards=st.integers(1, 5), shard=st.integers(0, 4))
def test_length_matches_output(n: int, shards: int, shard: int) -> None:
    dp = IterableWrapper(range(n)).sharding_filter()
    apply_sharding(dp, shards, shard % shards)
    assert len(dp) == len(list(dp))
