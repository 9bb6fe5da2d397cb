"""Unit tests for conveyor.sampler and conveyor.distributed (parity with torch: tests/parity)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.distributed import DistributedSampler, ProcessGroupNotInitializedError
from conveyor.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

FEW = settings(max_examples=60, deadline=None)


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_base_sampler_has_iter_but_no_len() -> None:
    with pytest.raises(NotImplementedError):
        iter(Sampler())
    assert not hasattr(Sampler, "__len__")


def test_sequential_sampler_reads_length_when_iterated() -> None:
    data = [0, 0, 0]
    sampler = SequentialSampler(data)
    data.append(0)
    assert list(sampler) == [0, 1, 2, 3]
    assert len(sampler) == 4


@FEW
@given(n=st.integers(1, 300), seed=st.integers(0, 2**31))
def test_random_sampler_is_a_permutation(n: int, seed: int) -> None:
    out = list(RandomSampler(range(n), generator=seeded(seed)))
    assert sorted(out) == list(range(n))


@FEW
@given(n=st.integers(1, 40), num_samples=st.integers(1, 200), seed=st.integers(0, 2**31))
def test_random_sampler_num_samples_without_replacement(
    n: int, num_samples: int, seed: int
) -> None:
    out = list(RandomSampler(range(n), num_samples=num_samples, generator=seeded(seed)))
    assert len(out) == num_samples
    # Whole permutations first, then a prefix of one more: counts differ by at most one.
    counts = Counter(out)
    full = num_samples // n
    assert all(full <= counts[i] <= full + 1 for i in range(n))


@pytest.mark.parametrize("num_samples", [1, 31, 32, 33, 100])
def test_random_sampler_with_replacement_stays_in_range(num_samples: int) -> None:
    out = list(RandomSampler(range(5), True, num_samples, seeded()))
    assert len(out) == num_samples
    assert set(out) <= set(range(5))


def test_random_sampler_generator_none_draws_from_global_rng_lazily() -> None:
    torch.manual_seed(3)
    it = iter(RandomSampler(range(10)))
    after_iter = torch.random.get_rng_state()
    torch.manual_seed(3)
    assert torch.equal(after_iter, torch.random.get_rng_state())  # iter() draws nothing
    torch.manual_seed(3)
    first = list(it)
    torch.manual_seed(3)
    assert list(RandomSampler(range(10))) == first


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"replacement": 1}, TypeError),
        ({"num_samples": 0}, ValueError),
        ({"num_samples": -1}, ValueError),
        ({"num_samples": 2.0}, ValueError),
    ],
)
def test_random_sampler_argument_errors(kwargs: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        RandomSampler(range(3), **kwargs)  # type: ignore[arg-type]


def test_random_sampler_empty_source_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="num_samples=0"):
        RandomSampler([])
    with pytest.raises(ValueError, match="empty data_source"):
        list(RandomSampler([], num_samples=3))


def test_subset_random_sampler_permutes_given_indices() -> None:
    indices = [10, 20, 30, 40]
    out = list(SubsetRandomSampler(indices, seeded()))
    assert sorted(out) == indices
    assert len(SubsetRandomSampler(indices)) == 4


def test_weighted_sampler_never_draws_zero_weight() -> None:
    out = list(WeightedRandomSampler([0.0, 1.0, 0.0, 2.0], 200, generator=seeded()))
    assert set(out) <= {1, 3}
    assert len(out) == 200
    no_repeat = list(WeightedRandomSampler([1, 1, 1], 3, replacement=False, generator=seeded()))
    assert sorted(no_repeat) == [0, 1, 2]


@pytest.mark.parametrize(
    ("weights", "num_samples", "replacement", "match"),
    [
        ([1.0], 0, True, "num_samples"),
        ([1.0], True, True, "num_samples"),
        ([1.0], 1, 1, "replacement"),
        ([[1.0, 2.0]], 1, True, "1d"),
        ([1.0, -1.0], 1, True, "non-negative"),
        ([1.0, float("nan")], 1, True, "finite"),
        ([0.0, 0.0], 1, True, "positive value"),
        ([1.0, 0.0, 2.0], 3, False, "replacement=True"),
    ],
)
def test_weighted_sampler_argument_errors(
    weights: list[float], num_samples: int, replacement: bool, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        WeightedRandomSampler(weights, num_samples, replacement)


def batch_sources(n: int, seed: int) -> list[Iterable[int]]:
    """One source per BatchSampler path: generic iterables and the chunked samplers."""
    return [
        range(n),
        list(range(n)),
        SequentialSampler(range(n)),
        RandomSampler(range(max(n, 1)), generator=seeded(seed)),
        RandomSampler(range(max(n, 1)), True, n + 1, seeded(seed)),
        DistributedSampler(range(n), num_replicas=1, rank=0, seed=seed),
    ]


@FEW
@given(
    n=st.integers(0, 150),
    batch_size=st.integers(1, 40),
    drop_last=st.booleans(),
    which=st.integers(0, 5),
)
def test_batch_sampler_preserves_order_and_sizes(
    n: int, batch_size: int, drop_last: bool, which: int
) -> None:
    source = batch_sources(n, seed=n)[which]
    flat = list(source)  # a seeded copy below yields the same order
    source = batch_sources(n, seed=n)[which]
    sampler = BatchSampler(source, batch_size, drop_last)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert all(len(b) == batch_size for b in batches[:-1])
    if batches:
        assert 0 < len(batches[-1]) <= batch_size
        assert not drop_last or len(batches[-1]) == batch_size
    joined = [i for b in batches for i in b]
    assert joined == flat[: len(joined)]
    assert len(flat) - len(joined) == (len(flat) % batch_size if drop_last else 0)


def test_batch_sampler_fast_path_respects_overridden_iter() -> None:
    class Reversed(RandomSampler):
        def __iter__(self) -> Iterator[int]:
            return iter(range(len(self.data_source) - 1, -1, -1))

    assert list(BatchSampler(Reversed(range(5)), 2, False)) == [[4, 3], [2, 1], [0]]


def test_batch_sampler_batches_are_fresh_lists() -> None:
    batches = list(BatchSampler(RandomSampler(range(6), generator=seeded()), 3, False))
    batches[0].append(99)
    assert len(batches[1]) == 3
    assert all(type(b) is list for b in batches)


@pytest.mark.parametrize(
    ("batch_size", "drop_last", "match"),
    [
        (0, False, "batch_size"),
        (-2, False, "batch_size"),
        (True, False, "batch_size"),
        (2.0, False, "batch_size"),
        (2, 0, "drop_last"),
        (2, None, "drop_last"),
    ],
)
def test_batch_sampler_argument_errors(batch_size: object, drop_last: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BatchSampler(range(3), batch_size, drop_last)  # type: ignore[arg-type]


def test_distributed_sampler_without_process_group_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="pass num_replicas= and rank="):
        DistributedSampler(range(4))
    with pytest.raises(ValueError, match="init_process_group"):
        DistributedSampler(range(4), num_replicas=2)
    assert issubclass(ProcessGroupNotInitializedError, RuntimeError)


@pytest.mark.parametrize(("num_replicas", "rank"), [(2, 2), (2, -1), (1, 5), (0, 0)])
def test_distributed_sampler_invalid_rank(num_replicas: int, rank: int) -> None:
    with pytest.raises(ValueError, match=f"Invalid rank {rank}"):
        DistributedSampler(range(4), num_replicas=num_replicas, rank=rank)


def test_distributed_sampler_set_epoch_changes_order_deterministically() -> None:
    sampler = DistributedSampler(range(50), num_replicas=2, rank=0, seed=1)
    first = list(sampler)
    assert list(sampler) == first
    sampler.set_epoch(1)
    assert list(sampler) != first
    sampler.set_epoch(0)
    assert list(sampler) == first


def test_distributed_sampler_pads_by_repeating_whole_list() -> None:
    out = [
        list(DistributedSampler(range(2), num_replicas=5, rank=r, shuffle=False)) for r in range(5)
    ]
    assert out == [[0], [1], [0], [1], [0]]


@FEW
@given(
    n=st.integers(0, 120),
    replicas=st.integers(1, 9),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_distributed_sampler_ranks_partition_the_dataset(
    n: int, replicas: int, shuffle: bool, drop_last: bool, seed: int
) -> None:
    shards = [
        list(DistributedSampler(range(n), replicas, rank, shuffle, seed, drop_last))
        for rank in range(replicas)
    ]
    sizes = {len(s) for s in shards}
    assert len(sizes) == 1  # every rank gets the same count
    everything = [i for s in shards for i in s]
    counts = Counter(everything)
    if drop_last or n % replicas == 0:
        assert len(everything) == len(set(everything))  # each index at most once
        assert len(everything) == n - n % replicas
    else:
        assert set(everything) == set(range(n))  # every index, padding repeats a few
        assert len(everything) == n + (-n) % replicas
        assert max(counts.values()) <= -(-len(everything) // max(n, 1))
