"""GlobalShuffleSampler: one global order per epoch, any split, O(1) resume and memory."""

from __future__ import annotations

import itertools
import json
import statistics
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler as TorchDistributedSampler

from conveyor import GlobalShuffleSampler
from conveyor.distributed import ProcessGroupNotInitializedError
from conveyor.sampler import Sampler
from uniformity import REJECT_Z, worst_z

FEW = settings(max_examples=80, deadline=None)
AWKWARD = [1, 2, 3, 255, 256, 257, 1023, 1025, 4097, 65_535, 65_537, 99_991]


def interleave(outputs: list[list[int]]) -> list[int]:
    """Rank 0's first index, rank 1's first, ..., rank 0's second, ... (equal lengths)."""
    return [index for group in zip(*outputs, strict=True) for index in group]


def ranks(n: int, world: int, **kwargs: object) -> list[GlobalShuffleSampler]:
    return [
        GlobalShuffleSampler(n, num_replicas=world, rank=r, **kwargs)  # type: ignore[arg-type]
        for r in range(world)
    ]


@pytest.mark.parametrize("n", [*range(1, 301), *AWKWARD])
def test_every_epoch_is_a_permutation(n: int) -> None:
    sampler = GlobalShuffleSampler(n, seed=n)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        assert sorted(sampler.permutation().tolist()) == list(range(n))
        assert sorted(sampler) == list(range(n))


@pytest.mark.parametrize("block_size", [1, 2, 3, 7, 64, 1000, 5000])
@pytest.mark.parametrize("n", [1, 5, 63, 64, 65, 999, 1000, 1001, 4097])
def test_blocked_epochs_are_permutations(n: int, block_size: int) -> None:
    order = GlobalShuffleSampler(n, seed=3, block_size=block_size).permutation().tolist()
    assert sorted(order) == list(range(n))


def test_orders_differ_per_epoch_and_per_seed() -> None:
    orders = set()
    for seed, epoch in itertools.product(range(4), range(4)):
        sampler = GlobalShuffleSampler(10_000, seed=seed)
        sampler.set_epoch(epoch)
        orders.add(tuple(sampler.permutation(0, 100).tolist()))
    assert len(orders) == 16


@pytest.mark.parametrize(("n", "block_size"), [(100_003, None), (1_000_000, None)])
def test_the_order_passes_the_uniformity_checks(n: int, block_size: int | None) -> None:
    sampler = GlobalShuffleSampler(n, seed=11, block_size=block_size)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert worst_z(sampler.permutation()) < REJECT_Z


@FEW
@given(
    n=st.integers(0, 500),
    world=st.integers(1, 9),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 1000),
)
def test_ranks_split_like_distributed_sampler_over_one_global_order(
    n: int, world: int, drop_last: bool, seed: int, epoch: int
) -> None:
    # torch's DistributedSampler (no shuffle) over the global order is the oracle: the same
    # share per rank, the same padding (repeats from the start) or the same dropped tail.
    samplers = ranks(n, world, seed=seed, drop_last=drop_last)
    for sampler in samplers:
        sampler.set_epoch(epoch)
    order = samplers[0].permutation().tolist()
    for rank, sampler in enumerate(samplers):
        oracle = TorchDistributedSampler(
            order, num_replicas=world, rank=rank, shuffle=False, drop_last=drop_last
        )
        assert list(sampler) == [order[i] for i in oracle]
        assert len(sampler) == len(oracle)
    assert samplers[0].total_size == oracle.total_size


@FEW
@given(n=st.integers(1, 2000), worlds=st.lists(st.integers(1, 12), min_size=2, max_size=4))
def test_interleaved_ranks_give_the_same_sequence_for_every_world_size(
    n: int, worlds: list[int]
) -> None:
    order = GlobalShuffleSampler(n, seed=5, num_replicas=1, rank=0).permutation().tolist()
    for world in worlds:
        merged = interleave([list(s) for s in ranks(n, world, seed=5)])
        assert merged[:n] == order
        assert merged[n:] == (order * world)[: len(merged) - n]  # padding: from the start


@FEW
@given(
    n=st.integers(1, 3000),
    start=st.integers(0, 3000),
    length=st.integers(0, 3000),
    block_size=st.one_of(st.none(), st.integers(1, 400)),
)
def test_permutation_blocks_agree_with_the_whole(
    n: int, start: int, length: int, block_size: int | None
) -> None:
    sampler = GlobalShuffleSampler(n, seed=9, block_size=block_size)
    start = min(start, n)
    stop = min(n, start + length)
    whole = sampler.permutation()
    assert whole.dtype == np.int64
    assert np.array_equal(sampler.permutation(start, stop), whole[start:stop])


def test_permutation_rejects_positions_outside_the_epoch() -> None:
    sampler = GlobalShuffleSampler(10)
    for start, stop in [(-1, 3), (3, 2), (0, 11)]:
        with pytest.raises(ValueError, match="outside the epoch"):
            sampler.permutation(start, stop)


@FEW
@given(
    n=st.integers(1, 600),
    old_world=st.integers(1, 6),
    new_world=st.integers(1, 6),
    drop_last=st.booleans(),
    taken=st.integers(0, 700),
    block_size=st.one_of(st.none(), st.integers(2, 50)),
)
def test_resume_on_another_world_size_delivers_the_rest_exactly_once(
    n: int, old_world: int, new_world: int, drop_last: bool, taken: int, block_size: int | None
) -> None:
    kwargs = {"seed": 3, "drop_last": drop_last, "block_size": block_size}
    old = ranks(n, old_world, **kwargs)
    for sampler in old:
        sampler.set_epoch(2)
    iterators = [iter(s) for s in old]
    taken = min(taken, len(old[0]))
    seen = interleave([list(itertools.islice(it, taken)) for it in iterators])
    state = json.loads(json.dumps(old[1 % old_world].state_dict()))
    assert state["position"] == taken * old_world and state["epoch"] == 2

    new = ranks(n, new_world, **kwargs)
    for sampler in new:
        sampler.load_state_dict(state)
        sampler.set_epoch(2)  # the training loop sets the epoch again: position kept
    rest = interleave([list(s) for s in new])
    order = old[0].permutation().tolist()
    done = min(len(seen), n)
    assert seen[:done] == order[:done]
    if done < n:
        expected_rest = n - done if not drop_last else (n - done) // new_world * new_world
        assert rest[:expected_rest] == order[done : done + expected_rest]
        # Every sample exactly once over both runs (bar drop_last's tail and padding).
        assert len(set(seen[:done] + rest[:expected_rest])) == done + expected_rest
    else:
        assert rest == []


def test_loaded_position_applies_to_one_iteration_and_set_epoch_resets_it() -> None:
    sampler = GlobalShuffleSampler(100, num_replicas=2, rank=0)
    sampler.load_state_dict({**sampler.state_dict(), "position": 60})
    assert len(sampler) == 20
    first = list(sampler)
    assert len(first) == 20 and first == sampler.permutation(60, 100).tolist()[::2]
    assert len(sampler) == 50 and len(list(sampler)) == 50  # the next iteration: whole
    sampler.load_state_dict({**sampler.state_dict(), "position": 60})
    sampler.set_epoch(1)
    assert len(list(sampler)) == 50


def test_state_dict_follows_the_live_iteration() -> None:
    sampler = GlobalShuffleSampler(100_000, num_replicas=4, rank=3, seed=1)
    iterator = iter(sampler)
    assert sampler.state_dict()["position"] == 0
    for taken in (1, 255, 256, 257, 20_000):
        while sampler.state_dict()["position"] < taken * 4:
            next(iterator)
        assert sampler.state_dict()["position"] == taken * 4
    assert len(sampler) == 25_000
    rest = list(iterator)
    assert len(rest) == 5_000 and sampler.state_dict()["position"] == 100_000


def test_state_is_small_json_and_checked_on_load() -> None:
    sampler = GlobalShuffleSampler(2**40, seed=2**64 - 1, block_size=4096)
    state = sampler.state_dict()
    assert state["version"] == 1 and len(json.dumps(state)) < 200
    other = GlobalShuffleSampler(2**40, block_size=4096)
    other.load_state_dict(json.loads(json.dumps(state)))
    assert other.seed == 2**64 - 1 and other.permutation(0, 5).tolist() == (
        sampler.permutation(0, 5).tolist()
    )
    with pytest.raises(ValueError, match="num_samples=1099511627776"):
        GlobalShuffleSampler(2**40 - 1, block_size=4096).load_state_dict(state)
    with pytest.raises(ValueError, match="block_size=4096"):
        GlobalShuffleSampler(2**40).load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        other.load_state_dict({**state, "version": 99})


def test_resume_deep_into_a_huge_epoch_is_immediate_and_small() -> None:
    sampler = GlobalShuffleSampler(2**40, num_replicas=8, rank=5)
    sampler.load_state_dict({**sampler.state_dict(), "position": 2**39 + 8 * 12_345})
    tracemalloc.start()
    try:
        iterator = iter(sampler)
        first = next(iterator)
        head = [first, *itertools.islice(iterator, 100_000)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20  # one block of indices, not 8 bytes per sample (8 TiB)
    expected = sampler.permutation(2**39 + 8 * 12_345 + 5, 2**39 + 8 * 12_345 + 5 + 1)
    assert head[0] == int(expected[0])
    assert len(set(head)) == len(head)


def test_first_index_in_well_under_a_millisecond() -> None:
    def first_index_s() -> float:
        start = time.perf_counter()
        next(iter(GlobalShuffleSampler(2**40, seed=7)))
        return time.perf_counter() - start

    assert statistics.median(first_index_s() for _ in range(21)) < 1e-3


def test_blocks_are_visited_one_at_a_time() -> None:
    n, block = 100_000, 1000
    sampler = GlobalShuffleSampler(n + 123, seed=4, block_size=block)
    order = sampler.permutation()
    blocks = order // block
    assert np.count_nonzero(np.diff(blocks)) == len(np.unique(blocks)) - 1
    # A one-shard cache misses once per block; without blocks it misses almost always.
    plain = GlobalShuffleSampler(n + 123, seed=4).permutation() // block
    assert np.count_nonzero(np.diff(plain)) > 0.99 * n
    other_epoch = GlobalShuffleSampler(n + 123, seed=4, block_size=block)
    other_epoch.set_epoch(1)
    assert not np.array_equal(other_epoch.permutation() // block, blocks)


def test_a_launched_job_without_a_process_group_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ProcessGroupNotInitializedError, match="WORLD_SIZE=4"):
        GlobalShuffleSampler(10)
    assert len(GlobalShuffleSampler(10, num_replicas=4, rank=1)) == 3  # explicit: fine


def test_arguments_are_checked() -> None:
    assert isinstance(GlobalShuffleSampler(3), Sampler)
    assert GlobalShuffleSampler(3).num_replicas == 1  # no process group: one process
    with pytest.raises(ValueError, match="Invalid rank 2"):
        GlobalShuffleSampler(3, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="Invalid rank 1"):
        GlobalShuffleSampler(3, rank=1)
    for bad in ({"num_samples": -1}, {"num_samples": 2**63}, {"block_size": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            GlobalShuffleSampler(**{"num_samples": 3, **bad})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_replicas"):
        GlobalShuffleSampler(3, num_replicas=0, rank=0)
    assert list(GlobalShuffleSampler(0)) == [] and len(GlobalShuffleSampler(0)) == 0
