"""TarShards resume on any topology: a checkpoint taken with N workers of one kind resumes
with any number of workers of any kind (real worker processes and threads), shuffle buffer
and shards in progress included, and delivers every remaining sample exactly once (the
same checks as tests/integration/test_elastic_streams.py for ShardedStream)."""

from __future__ import annotations

import gc
import itertools
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor import DataLoader, merge_checkpoints
from conveyor.datapipes.iter import SHARDING_PRIORITIES
from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import ShardWriter

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

# Uneven shards: workers finish them at different rates, mid-shard checkpoints abound.
SIZES = (1, 1, 6, 1, 9, 1, 8, 2, 1, 5, 1, 1, 3, 1, 7, 1)
ALL = sorted(f"{s:02d}-{i:02d}" for s, size in enumerate(SIZES) for i in range(size))


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("elastic-tar")
    paths = []
    for s, size in enumerate(SIZES):
        with ShardWriter(str(root / f"part-{s:02d}-%d.tar")) as writer:
            for i in range(size):
                writer.write({"__key__": f"{s:02d}-{i:02d}", "txt": "x" * (100 + 37 * i)})
        paths += writer.shards
    return paths


def loader(
    shards: list[str], topology: tuple[int, str], batch_size: int, seed: int = 5
) -> DataLoader[Any]:
    num_workers, kind = topology
    pipe = TarShards(shards, decode=None, shuffle=True, shuffle_buffer=5, seed=3)
    extra = {"worker_type": kind} if num_workers else {}
    return DataLoader(
        pipe,
        batch_size=batch_size,
        num_workers=num_workers,
        collate_fn=_keys,
        generator=torch.Generator().manual_seed(seed),  # the order of the first run
        **extra,
    )


def _keys(samples: list[dict[str, Any]]) -> list[str]:
    return [s["__key__"] for s in samples]


def take(loader_: DataLoader[Any], batches: int | None) -> tuple[list[str], Any]:
    it = iter(loader_)
    got = [x for batch in itertools.islice(it, batches) for x in batch]
    state = loader_.state_dict()
    del it
    gc.collect()
    return got, state


topology = st.tuples(st.sampled_from([0, 1, 2, 3]), st.sampled_from(["process", "thread"]))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    first=topology,
    second=topology,
    third=topology,
    steps=st.tuples(st.integers(0, 7), st.integers(0, 7)),
    sizes=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
    seeds=st.tuples(st.integers(0, 99), st.integers(0, 99), st.integers(0, 99)),
)
def test_resume_on_any_topology_delivers_every_remaining_sample_once(
    shards: list[str],
    first: tuple[int, str],
    second: tuple[int, str],
    third: tuple[int, str],
    steps: tuple[int, int],
    sizes: tuple[int, int, int],
    seeds: tuple[int, int, int],
) -> None:
    """Each loader draws its own seeds; a resumed one follows the checkpoint's order."""
    got_1, state = take(loader(shards, first, sizes[0], seeds[0]), steps[0])
    resumed = loader(shards, second, sizes[1], seeds[1])
    resumed.load_state_dict(state)
    got_2, state = take(resumed, steps[1])  # a checkpoint of a resumed run, resumed again
    if not state["in_epoch"]:
        assert sorted(got_1 + got_2) == ALL
        return
    last = loader(shards, third, sizes[2], seeds[2])
    last.load_state_dict(state)
    got_3, _ = take(last, None)
    assert sorted(got_1 + got_2 + got_3) == ALL


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ((2, "process"), (3, "process")),
        ((2, "thread"), (3, "thread")),
        ((3, "process"), (2, "thread")),
    ],
)
def test_two_workers_on_three_and_threads(
    shards: list[str], before: tuple[int, str], after: tuple[int, str]
) -> None:
    """Mid-shard and with a full shuffle buffer: nothing lost, nothing twice."""
    got, state = take(loader(shards, before, 2), 7)
    assert state["workers"]["states"][0]["items"]["slots"]  # buffered samples, as positions
    resumed = loader(shards, after, 3)
    resumed.load_state_dict(state)
    rest, _ = take(resumed, None)
    assert sorted(got + rest) == ALL


def test_same_topology_resumes_the_same_batches(shards: list[str]) -> None:
    uninterrupted, _ = take(loader(shards, (2, "process"), 3), None)
    got, state = take(loader(shards, (2, "process"), 3), 4)
    resumed = loader(shards, (2, "process"), 3)
    resumed.load_state_dict(state)
    rest, _ = take(resumed, None)
    assert got + rest == uninterrupted


def test_merged_ranks_resume_on_another_world_size(shards: list[str]) -> None:
    """Two ranks' checkpoints (taken as rank 0 and rank 1 of 2) merged, resumed on one."""
    got, states = [], []
    for rank in range(2):
        pipe = TarShards(shards, decode=None, shuffle=True, shuffle_buffer=5, seed=3)
        pipe.shards.apply_sharding(2, rank, SHARDING_PRIORITIES.DISTRIBUTED)  # as torchrun
        ld = DataLoader(
            pipe,
            batch_size=2,
            num_workers=2,
            collate_fn=_keys,
            generator=torch.Generator().manual_seed(5),
        )
        part, state = take(ld, 3)
        got += part
        state["topology"] = {"world_size": 2, "rank": rank}
        states.append(state)
    merged = merge_checkpoints(states)
    resumed = loader(shards, (3, "thread"), 2)
    resumed.load_state_dict(merged)
    rest, _ = take(resumed, None)
    assert sorted(got + rest) == ALL
