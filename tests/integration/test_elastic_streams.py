"""Elastic stream resume through the DataLoader: a checkpoint of a `ShardedStream` taken
with N workers of one kind resumes with any number of workers of any kind (real worker
processes and threads) and delivers every remaining sample exactly once. Streams that
cannot be re-split are refused with the field that changed."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor import DataLoader, IterableDataset, ShardedStream, merge_checkpoints

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

# Uneven shards, so that workers finish shards at different rates (their progress differs
# by more than one shard: the case the merge must get right).
SIZES = (1, 1, 6, 1, 1, 1, 8, 2, 1, 0, 5, 1, 1, 3, 1, 1)
SHARDS = [[f"{s}-{i}" for i in range(size)] for s, size in enumerate(SIZES)]
ALL = sorted(x for shard in SHARDS for x in shard)


def read_list(shard: list[str], offset: int) -> Iterator[str]:
    """A shard reader that seeks: the samples from the ``offset``-th on."""
    return iter(shard[offset:])


def stream(shuffle: bool = True) -> ShardedStream[list[str], str]:
    return ShardedStream(SHARDS, read_list, shuffle=shuffle, seed=11)


def loader(topology: tuple[int, str], batch_size: int, **kwargs: Any) -> DataLoader[Any]:
    num_workers, kind = topology
    extra = {"worker_type": kind} if num_workers else {}
    return DataLoader(stream(), batch_size=batch_size, num_workers=num_workers, **extra, **kwargs)  # type: ignore[arg-type]


def take(loader_: DataLoader[Any], batches: int | None) -> tuple[list[str], Any]:
    """Up to ``batches`` batches (None: to the end) and the checkpoint after them."""
    it = iter(loader_)
    got = [x for batch in itertools.islice(it, batches) for x in batch]
    state = loader_.state_dict()
    del it
    return got, state


topology = st.tuples(st.sampled_from([0, 1, 2, 3]), st.sampled_from(["process", "thread"]))


@settings(max_examples=25, deadline=None)
@given(
    first=topology,
    second=topology,
    third=topology,
    steps=st.tuples(st.integers(0, 6), st.integers(0, 6)),
    sizes=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
)
def test_resume_on_any_topology_delivers_every_remaining_sample_once(
    first: tuple[int, str],
    second: tuple[int, str],
    third: tuple[int, str],
    steps: tuple[int, int],
    sizes: tuple[int, int, int],
) -> None:
    got_1, state = take(loader(first, sizes[0]), steps[0])
    resumed = loader(second, sizes[1])
    resumed.load_state_dict(state)
    got_2, state = take(resumed, steps[1])  # a checkpoint of a resumed run, resumed again
    if not state["in_epoch"]:  # the resumed run finished the epoch
        assert sorted(got_1 + got_2) == ALL
        return
    last = loader(third, sizes[2])
    last.load_state_dict(state)
    got_3, _ = take(last, None)
    assert sorted(got_1 + got_2 + got_3) == ALL


def test_same_topology_resumes_the_same_batches() -> None:
    uninterrupted, _ = take(loader((2, "process"), 3), None)
    got, state = take(loader((2, "process"), 3), 4)
    resumed = loader((2, "process"), 3)
    resumed.load_state_dict(state)
    rest, _ = take(resumed, None)
    assert got + rest == uninterrupted


def test_a_stream_in_progress_continues_at_its_offset() -> None:
    """With one worker and one shard, the checkpoint is mid-shard: the new workers read
    the rest of that shard, not all of it again (no repeats) and not none of it."""
    one = ShardedStream([[*range(10)], [*range(10, 13)]], lambda s, o: s[o:])
    ld = DataLoader(one, batch_size=4, num_workers=1)
    got, state = take(ld, 1)
    assert got == [0, 1, 2, 3]
    again = ShardedStream([[*range(10)], [*range(10, 13)]], lambda s, o: s[o:])
    resumed = DataLoader(again, batch_size=4, num_workers=2, worker_type="thread")
    resumed.load_state_dict(state)
    rest, _ = take(resumed, None)
    assert sorted(rest) == [*range(4, 13)]


class Counter(IterableDataset[int]):
    """A stream whose state is its own position: correct only for the same split."""

    def __init__(self) -> None:
        self.at = 0

    def __iter__(self) -> Iterator[int]:
        while self.at < 40:
            self.at += 1
            yield self.at - 1

    def state_dict(self) -> dict[str, Any]:
        return {"at": self.at}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.at = state["at"]


def test_a_stream_that_cannot_be_resplit_is_refused_naming_the_field() -> None:
    _, state = take(DataLoader(Counter(), batch_size=2, num_workers=2), 3)
    for num_workers in (0, 3):
        resumed = DataLoader(Counter(), batch_size=2, num_workers=num_workers)
        resumed.load_state_dict(state)
        with pytest.raises(
            ValueError, match=f"num_workers=2, this loader has num_workers={num_workers}"
        ):
            next(iter(resumed))


def test_one_ranks_checkpoint_is_refused_on_another_world_size() -> None:
    _, state = take(loader((2, "process"), 2), 3)
    state["topology"] = {"world_size": 2, "rank": 1}  # as rank 1 of 2 would have saved it
    resumed = loader((2, "process"), 2)
    resumed.load_state_dict(state)
    with pytest.raises(
        ValueError, match=r"world_size=2, this loader has world_size=1.*merge_checkpoints"
    ):
        next(iter(resumed))
    with pytest.raises(ValueError, match="one checkpoint of each of the 2 ranks"):
        merge_checkpoints([state])


def test_merge_checkpoints_of_one_rank_resumes_anywhere() -> None:
    got, state = take(loader((3, "thread"), 2), 2)
    merged = merge_checkpoints([state])
    assert merged["workers"] is None and merged["elastic"] is not None
    resumed = loader((0, "process"), 5)
    resumed.load_state_dict(merged)
    rest, _ = take(resumed, None)
    assert sorted(got + rest) == ALL


def test_sharded_stream_checks_what_its_checkpoint_depends_on() -> None:
    _, state = take(loader((1, "process"), 2), 2)
    other = ShardedStream(SHARDS[:-1], read_list, shuffle=True, seed=11)
    resumed = DataLoader(other, batch_size=2, num_workers=2)
    with pytest.raises(ValueError, match=r"identity=.*another stream's checkpoint"):
        resumed.load_state_dict(state)  # refused at once, in the main process
    with pytest.raises(ValueError, match="units=16, this stream has units=15"):
        other.load_state_dict(state["workers"]["states"][0])
    reseeded = ShardedStream(SHARDS, read_list, shuffle=True, seed=12)
    with pytest.raises(ValueError, match="seed=11, this stream has seed=12"):
        reseeded.load_state_dict(state["workers"]["states"][0])
    with pytest.raises(ValueError, match="expects the dict its state_dict"):
        reseeded.load_state_dict({"at": 3})
