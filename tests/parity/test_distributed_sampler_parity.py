"""conveyor.distributed.DistributedSampler against torch's: same shards, lengths and errors."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor import sampler as cvs
from conveyor.distributed import DistributedSampler, ProcessGroupNotInitializedError

FEW = settings(max_examples=60, deadline=None)


def shards(
    cls: type, n: int, replicas: int, *, shuffle: bool, drop_last: bool, seed: int, epoch: int
) -> list[list[int]]:
    out = []
    for rank in range(replicas):
        sampler = cls(
            range(n),
            num_replicas=replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        sampler.set_epoch(epoch)
        assert len(sampler) == len(list(sampler))
        out.append(list(sampler))
    return out


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("replicas", [1, 3, 7, 12])
@pytest.mark.parametrize("n", [0, 1, 5, 12, 13, 30])
def test_same_shards_as_torch(n: int, replicas: int, shuffle: bool, drop_last: bool) -> None:
    options = {"shuffle": shuffle, "drop_last": drop_last, "seed": 17, "epoch": 3}
    expected = shards(tud.DistributedSampler, n, replicas, **options)
    assert shards(DistributedSampler, n, replicas, **options) == expected


@FEW
@given(
    n=st.integers(0, 200),
    replicas=st.integers(1, 16),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 100),
)
def test_same_shards_as_torch_property(
    *, n: int, replicas: int, shuffle: bool, drop_last: bool, seed: int, epoch: int
) -> None:
    options = {"shuffle": shuffle, "drop_last": drop_last, "seed": seed, "epoch": epoch}
    expected = shards(tud.DistributedSampler, n, replicas, **options)
    assert shards(DistributedSampler, n, replicas, **options) == expected


@FEW
@given(
    n=st.integers(1, 200),
    replicas=st.integers(1, 16),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_every_index_once_across_ranks(n: int, replicas: int, drop_last: bool, seed: int) -> None:
    parts = shards(
        DistributedSampler, n, replicas, shuffle=True, drop_last=drop_last, seed=seed, epoch=1
    )
    assert len({len(p) for p in parts}) == 1
    union = [i for p in parts for i in p]
    if drop_last or n % replicas == 0:
        assert len(union) == len(set(union))
        assert len(set(union)) == n - n % replicas
    else:
        assert set(union) == set(range(n))


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("batch_size", [1, 4, 9])
def test_batch_sampler_over_distributed_sampler(batch_size: int, drop_last: bool) -> None:
    theirs = tud.BatchSampler(tud.DistributedSampler(range(23), 3, 1), batch_size, drop_last)
    ours = cvs.BatchSampler(DistributedSampler(range(23), 3, 1), batch_size, drop_last)
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)


def test_order_is_fixed_when_iter_is_called() -> None:
    theirs, ours = tud.DistributedSampler(range(20), 2, 0), DistributedSampler(range(20), 2, 0)
    it_theirs, it_ours = iter(theirs), iter(ours)
    theirs.set_epoch(5)
    ours.set_epoch(5)
    assert list(it_ours) == list(it_theirs)
    assert list(itertools.islice(ours, 3)) == list(itertools.islice(theirs, 3))


@pytest.mark.parametrize(("replicas", "rank"), [(2, 2), (2, -1), (0, 0), (-1, 0), (3, 10)])
def test_same_error_for_invalid_rank(replicas: int, rank: int) -> None:
    with pytest.raises(ValueError) as theirs:
        tud.DistributedSampler(range(4), num_replicas=replicas, rank=rank)
    with pytest.raises(ValueError) as ours:
        DistributedSampler(range(4), num_replicas=replicas, rank=rank)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize(
    "kwargs", [{}, {"num_replicas": 2}, {"rank": 0}], ids=["neither", "no_rank", "no_replicas"]
)
def test_without_process_group_raises_what_torch_raises_and_more(kwargs: dict[str, int]) -> None:
    assert not dist.is_initialized()
    with pytest.raises(ValueError):  # torch: ValueError from get_world_size/get_rank
        tud.DistributedSampler(range(4), **kwargs)
    with pytest.raises(ValueError, match="init_process_group"):
        DistributedSampler(range(4), **kwargs)
    with pytest.raises(RuntimeError, match="pass num_replicas= and rank="):
        DistributedSampler(range(4), **kwargs)
    assert issubclass(ProcessGroupNotInitializedError, RuntimeError)


@pytest.fixture
def process_group(tmp_path: Path) -> Iterator[None]:
    """A one-rank gloo group, so rank and world size come from torch.distributed."""
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.usefixtures("process_group")
def test_reads_rank_and_world_size_from_process_group() -> None:
    theirs, ours = tud.DistributedSampler(range(10)), DistributedSampler(range(10))
    assert (ours.num_replicas, ours.rank) == (theirs.num_replicas, theirs.rank) == (1, 0)
    assert list(ours) == list(theirs)
    with pytest.raises(ValueError, match="Invalid rank 1"):
        DistributedSampler(range(10), rank=1)
