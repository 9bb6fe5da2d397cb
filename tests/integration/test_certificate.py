"""The data-order certificate: every epoch's multiset digest of delivered sample identities.

An interrupted run resumed on another topology must end its epoch with the uninterrupted
run's digest; a single sample lost, repeated, or swapped for another through a resume is
caught, each time, by the digest (and, for losses and repeats, the count).
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import pytest
import torch

from conveyor import DataLoader, ShardedStream
from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import ShardWriter
from conveyor.state.position_codec import decode_positions, encode_positions

from sample_datasets import CountedStream, Range

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def _epoch(loader: DataLoader[Any], state: Any = None) -> tuple[str, int]:
    """(digest, samples) of an epoch run to its end, resumed from ``state`` if given."""
    if state is not None:
        loader.load_state_dict(state)
    for _ in loader:
        pass
    stats = loader.stats()
    return stats.epoch_digest, stats.epoch_samples


def _interrupted(loader: DataLoader[Any], batches: int) -> dict[str, Any]:
    iterator = iter(loader)
    for _ in itertools.islice(iterator, batches):
        pass
    state = loader.state_dict()
    del iterator
    return copy.deepcopy(state)  # type: ignore[arg-type]


# ------------------------------------------------------------------ map-style
def _map(num_workers: int = 2, kind: str = "process", batch_size: int = 1) -> DataLoader[Any]:
    return DataLoader(
        Range(30),
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        worker_type=kind,
        generator=torch.Generator().manual_seed(8),
    )


def test_a_map_style_epoch_certifies_every_index_once_on_any_topology() -> None:
    whole = _epoch(_map())
    assert whole[1] == 30 and whole[0] != "0" * 16
    state = _interrupted(_map(2, "process", 1), 7)
    assert _epoch(_map(3, "thread", 4), state) == whole  # another topology and batch size


@pytest.mark.parametrize(("change", "samples"), [(+1, 29), (-1, 31)])
def test_a_map_style_sample_lost_or_repeated_through_a_resume_is_caught(
    change: int, samples: int
) -> None:
    whole = _epoch(_map())
    state = _interrupted(_map(), 7)
    state["yielded"] += change  # one sample (batch_size=1) skipped, or delivered again
    state["samples"] += change
    damaged = _epoch(_map(3, "thread"), state)
    assert damaged[1] == samples and damaged[0] != whole[0]


# ------------------------------------------------------------------ tar shards
@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root: Path = tmp_path_factory.mktemp("certified")
    with ShardWriter(str(root / "part-%02d.tar"), max_count=7) as writer:
        for i in range(45):
            writer.write({"__key__": f"{i:04d}", "txt": f"sample {i}"})
    return list(writer.shards)


def _tar(shards: list[str], num_workers: int, kind: str = "process") -> DataLoader[Any]:
    pipe = TarShards(shards, decode=None, shuffle=True, shuffle_buffer=6, seed=4)
    return DataLoader(
        pipe,
        batch_size=2,
        num_workers=num_workers,
        worker_type=kind,
        collate_fn=lambda samples: [s["__key__"] for s in samples],
        generator=torch.Generator().manual_seed(3),
    )


def _edit_buffer(state: dict[str, Any], edit: Any) -> None:
    """Apply ``edit(positions)`` to worker 0's buffered sample positions."""
    states = state["workers"]["states"]
    states[0]["items"] = encode_positions(edit(decode_positions(states[0]["items"])))


def test_tar_shards_certify_the_same_samples_after_an_elastic_resume(shards: list[str]) -> None:
    whole = _epoch(_tar(shards, 2))
    assert whole[1] == 45
    state = _interrupted(_tar(shards, 2), 5)
    assert _epoch(_tar(shards, 3, "thread"), state) == whole  # another order, same samples


@pytest.mark.parametrize("fault", ["lost", "repeated", "swapped"])
def test_a_tar_sample_lost_repeated_or_swapped_through_a_resume_is_caught(
    shards: list[str], fault: str
) -> None:
    whole = _epoch(_tar(shards, 2))
    state = _interrupted(_tar(shards, 2), 5)
    if fault == "lost":
        _edit_buffer(state, lambda held: held[1:])
    elif fault == "repeated":
        _edit_buffer(state, lambda held: held + held[:1])
    else:  # one buffered sample replaced by one that another worker holds too
        twice = decode_positions(state["workers"]["states"][1]["items"])[0]
        _edit_buffer(state, lambda held: [twice, *held[1:]])
    digest, samples = _epoch(_tar(shards, 3, "thread"), state)
    assert digest != whole[0]
    expected = {"lost": 44, "repeated": 46, "swapped": 45}[fault]
    assert samples == expected  # a swap keeps the count: only the digest tells


# ------------------------------------------------------------------ other streams
def _read(shard: list[int], offset: int) -> Any:
    return iter(shard[offset:])


def test_a_sharded_stream_certifies_by_shard_and_offset_on_any_topology() -> None:
    def loader(num_workers: int, kind: str) -> DataLoader[Any]:
        stream = ShardedStream(
            [list(range(i, i + 5)) for i in range(0, 40, 5)], _read, shuffle=True
        )
        return DataLoader(stream, batch_size=3, num_workers=num_workers, worker_type=kind)

    whole = _epoch(loader(2, "process"))
    state = _interrupted(loader(2, "process"), 3)
    assert _epoch(loader(3, "thread"), state) == whole


def test_an_anonymous_stream_is_certified_by_position_on_its_own_split() -> None:
    def loader() -> DataLoader[Any]:
        return DataLoader(CountedStream(20), batch_size=3, num_workers=2)

    whole = _epoch(loader())
    state = _interrupted(loader(), 3)
    assert _epoch(loader(), state) == whole
    state["certificate"]["samples"] += 1  # a checkpoint that lies about the count
    assert _epoch(loader(), state)[0] != whole[0]
