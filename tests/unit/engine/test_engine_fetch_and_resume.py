"""Fetching and resuming arithmetic, without processes: fetchers, stream replay requests,
stream checkpoints, and resuming a map-style epoch on another number of ranks."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor.distributed import DistributedSampler
from conveyor.engine.resume.rank_resume import (
    apply_replica_resume,
    distributed_sampler,
    replica_state,
)
from conveyor.engine.workers.fetch import BatchSkipped, FetchSpec, IterableFetcher, make_fetcher
from conveyor.sampler import BatchSampler
from conveyor.state.loader_state import Resume, StreamResume, stream_resume_for


class Squares:
    def __getitem__(self, index: int) -> int:
        if index == 3:
            raise ValueError("three is bad")
        return index * index

    def __len__(self) -> int:
        return 8


def _spec(**changes: Any) -> FetchSpec:
    fields: dict[str, Any] = {
        "dataset": Squares(),
        "iterable_style": False,
        "auto_collation": True,
        "collate_fn": list,
        "drop_last": False,
    }
    fields.update(changes)
    return FetchSpec(**fields)


def test_map_fetcher_collates_a_batch_and_raises_bad_samples() -> None:
    fetcher = make_fetcher(_spec(), Squares())
    assert fetcher.fetch([1, 2]) == [1, 4] and fetcher.take_skips() == ()
    with pytest.raises(ValueError, match="three"):
        fetcher.fetch([2, 3])
    single = make_fetcher(_spec(auto_collation=False, collate_fn=lambda x: -x), Squares())
    assert single.fetch(2) == -4


def test_skipping_fetcher_drops_bad_samples_and_says_which() -> None:
    fetcher = make_fetcher(_spec(skip_bad_samples=True), Squares())
    assert fetcher.fetch([2, 3, 4]) == [4, 16]
    (skip,) = fetcher.take_skips()
    assert (skip.keys, skip.reason, skip.samples) == (("index 3",), "ValueError: three is bad", 1)
    assert fetcher.last_count == 2
    assert fetcher.take_skips() == ()
    with pytest.raises(BatchSkipped):
        fetcher.fetch([3])


def test_iterable_fetcher_partial_last_batch_and_drop_last() -> None:
    spec = _spec(dataset=range(5), iterable_style=True, samples_per_request=2)
    assert spec.replay_request == [None, None]
    kept = make_fetcher(spec, range(5))
    assert isinstance(kept, IterableFetcher) and not kept.started
    assert [kept.fetch([None] * 2) for _ in range(3)] == [[0, 1], [2, 3], [4]]
    with pytest.raises(StopIteration):
        kept.fetch([None] * 2)
    dropped = make_fetcher(_spec(iterable_style=True, drop_last=True), range(5))
    assert [dropped.fetch([None] * 2) for _ in range(2)] == [[0, 1], [2, 3]]
    with pytest.raises(StopIteration):
        dropped.fetch([None] * 2)


def test_stream_resume_checks_the_worker_count() -> None:
    saved = {"position": 2}  # a stream's own state: not re-splittable
    state: Any = {
        "version": 2,
        "in_epoch": True,
        "yielded": 3,
        "workers": {
            "num_workers": 2,
            "states": [saved, None],
            "counts": [0, 1],  # batches since each worker's state (all, without one)
            "active": [True, False],
            "next_worker": 0,
        },
    }
    streams = stream_resume_for(True, 2, Resume(state))
    assert streams == StreamResume((saved, None), (0, 1), (True, False), 0)
    assert streams.skips == (0, 1)  # a worker without state replays what it delivered
    assert stream_resume_for(False, 2, Resume(state)) is None  # map-style: nothing to split
    with pytest.raises(ValueError, match="num_workers=2"):
        stream_resume_for(True, 3, Resume(state))


def _replicas(rank: int, world: int) -> BatchSampler:
    sampler = DistributedSampler(list(range(24)), num_replicas=world, rank=rank, shuffle=False)
    return BatchSampler(sampler, 2, False)


def test_rank_resume_same_world_replays_and_skips() -> None:
    batches = _replicas(0, 2)
    sampler = distributed_sampler(batches)
    assert sampler is not None and distributed_sampler([[0, 1]]) is None
    saved = replica_state(sampler, per_request=2, consumed_before=0)
    state: Any = {"version": 1, "in_epoch": True, "yielded": 3, "replicas": saved}
    assert apply_replica_resume(sampler, Resume(state), 2) == (0, True)


def test_rank_resume_other_world_deals_out_the_rest_once() -> None:
    saved = replica_state(distributed_sampler(_replicas(0, 2)), 2, 0)
    state: Any = {"version": 1, "in_epoch": True, "yielded": 3, "replicas": saved}
    seen: list[int] = []
    for rank in range(3):
        batches = _replicas(rank, 3)
        consumed, skip = apply_replica_resume(distributed_sampler(batches), Resume(state), 2)
        assert (consumed, skip) == (3 * 2 * 2, False)
        seen += [i for batch in batches for i in batch]
    assert sorted(seen) == list(range(12, 24))  # 3 batches x 2 samples x 2 ranks were done


def test_rank_resume_with_another_batch_size_deals_out_the_rest_once() -> None:
    """Same world size, batch size 2 -> 4: not a replay of batches but of samples."""
    saved = replica_state(distributed_sampler(_replicas(0, 2)), 2, 0)
    state: Any = {"version": 1, "in_epoch": True, "yielded": 3, "replicas": saved}
    consumed, skip = apply_replica_resume(distributed_sampler(_replicas(0, 2)), Resume(state), 4)
    assert (consumed, skip) == (3 * 2 * 2, False)
