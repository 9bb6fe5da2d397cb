"""ShardLister: shards split across consumers, shared shuffle seeds, warnings."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.datapipes.iter import SHARDING_PRIORITIES
from conveyor.datapipes.iter.loading import ShardLister, TarShards
from conveyor.graph_settings import apply_sharding

URLS = [f"mem://s/{i:03d}.tar" for i in range(11)]


@settings(max_examples=30, deadline=None)
@given(
    consumers=st.integers(1, 11),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**62),
)
def test_every_shard_once_across_consumers(consumers: int, shuffle: bool, seed: int) -> None:
    seen: Counter[str] = Counter()
    for consumer in range(consumers):
        lister = ShardLister(URLS, shuffle=shuffle)
        lister.apply_sharding(consumers, consumer)
        lister.set_seed(seed)
        seen.update(lister)
    assert seen == Counter(URLS)


def test_groups_combine_like_sharding_filter() -> None:
    got = []
    for rank in range(2):
        for worker in range(3):
            lister = ShardLister(URLS)
            lister.apply_sharding(2, rank, SHARDING_PRIORITIES.DISTRIBUTED)
            lister.apply_sharding(3, worker, SHARDING_PRIORITIES.MULTIPROCESSING)
            got.append(list(lister))
    assert got[0] == URLS[0::6] and got[4] == URLS[4::6]  # rank 1 worker 1 is consumer 4


def test_graph_settings_reach_the_lister() -> None:
    pipe = TarShards(URLS)
    apply_sharding(pipe, 4, 1)
    assert pipe.shards.groups == {SHARDING_PRIORITIES.DEFAULT: (4, 1)}


def test_shuffle_changes_per_pass_with_seed() -> None:
    lister = ShardLister(URLS, shuffle=True, seed=5)
    first, second = list(lister), list(lister)
    assert sorted(first) == URLS and first != second
    assert list(ShardLister(URLS, shuffle=True, seed=5)) == first
    lister.set_shuffle(False)
    assert list(lister) == URLS


def test_fewer_shards_than_consumers_warns() -> None:
    lister = ShardLister(URLS[:2])
    lister.apply_sharding(4, 0)
    with pytest.warns(UserWarning, match="2 shard\\(s\\) for 4 consumers"):
        assert list(lister) == URLS[:1]


def test_resume_with_other_consumers_is_refused() -> None:
    lister = ShardLister(URLS)
    lister.apply_sharding(2, 0)
    it = iter(lister)
    next(it)
    state = lister.state_dict()
    other = ShardLister(URLS)
    other.apply_sharding(3, 0)
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="consumer 0 of 2"):
        next(iter(other))
    fewer = ShardLister(URLS[:5])
    fewer.apply_sharding(2, 0)
    fewer.load_state_dict(state)
    with pytest.raises(ValueError, match="same shards"):
        next(iter(fewer))


def test_needs_urls() -> None:
    with pytest.raises(ValueError, match="no shard URLs"):
        ShardLister([])
