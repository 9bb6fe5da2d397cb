"""Every DataPipe node meets the resume contract of `check_state_roundtrip`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from check_state_roundtrip import check_state_roundtrip, typed

from conveyor.datapipes.iter import (
    Batcher,
    BucketBatcher,
    Collator,
    Concater,
    Cycler,
    Demultiplexer,
    Filter,
    FlatMapper,
    Forker,
    GreedyJoiner,
    Grouper,
    Header,
    InMemoryCacheHolder,
    IterableWrapper,
    IterDataPipe,
    IterToMapConverter,
    Mapper,
    Multiplexer,
    PaddedBatcher,
    Prefetcher,
    ProcessRunner,
    Repeater,
    Sampler,
    Shuffler,
    UnBatcher,
    Zipper,
)
from conveyor.datapipes.map import (
    Batcher as MapBatcher,
)
from conveyor.datapipes.map import (
    Concater as MapConcater,
)
from conveyor.datapipes.map import (
    Mapper as MapMapper,
)
from conveyor.datapipes.map import (
    MapToIterConverter,
    SequenceWrapper,
)
from conveyor.datapipes.map import (
    Shuffler as MapShuffler,
)
from conveyor.datapipes.map import (
    Zipper as MapZipper,
)
from conveyor.graph_settings import apply_sharding


def double(x: int) -> int:
    return 2 * x


def is_odd(x: int) -> bool:
    return x % 2 == 1


def mod3(x: int) -> int:
    return x % 3


def pair(x: int) -> list[int]:
    return [x, -x]


class Countdown(IterDataPipe[int]):
    """A torch-style subclass: a generator ``__iter__`` and no cursor of its own."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        yield from range(self.n, 0, -1)


def source(n: int = 12) -> IterDataPipe[int]:
    return IterableWrapper(range(n))


def sharded() -> IterDataPipe[int]:
    dp = source(20).sharding_filter()
    apply_sharding(dp, 3, 1)
    return dp


def cached_second_pass() -> IterDataPipe[int]:
    dp = InMemoryCacheHolder(source(8))
    assert list(dp) == list(range(8))  # first pass fills the cache; the test reads the replay
    return dp


def batch_parity(batch: list[int]) -> int:
    return batch[0] // 2 % 2


GRAPHS: dict[str, Callable[[], IterDataPipe[Any]]] = {
    "IterableWrapper/sequence": source,
    "IterableWrapper/iterator": lambda: IterableWrapper(iter(range(7)), deepcopy=False),
    "torch-style subclass": lambda: Countdown(6),
    "Mapper": lambda: Mapper(source(), double),
    "Mapper/columns": lambda: Mapper(IterableWrapper([(i, i) for i in range(6)]), double, 1, -1),
    "Collator": lambda: Collator(Batcher(source(), 4)),
    "FlatMapper": lambda: FlatMapper(source(6), pair),
    "Filter": lambda: Filter(source(), is_odd),
    "Header": lambda: Header(source(), 5),
    "Batcher": lambda: Batcher(source(11), 3),
    "Batcher/drop_last": lambda: Batcher(source(11), 3, drop_last=True),
    "UnBatcher": lambda: UnBatcher(Batcher(Batcher(source(), 2), 2), unbatch_level=2),
    "Grouper": lambda: Grouper(source(20), mod3, buffer_size=5, group_size=3, drop_remaining=True),
    "Grouper/keep_key": lambda: Grouper(source(10), mod3, keep_key=True),
    "BucketBatcher": lambda: BucketBatcher(source(13), 2, batch_num=2, sort_key=lambda x: -x),
    "PaddedBatcher": lambda: PaddedBatcher(
        IterableWrapper([[1] * (i % 3 + 1) for i in range(7)]), 3
    ),
    "Concater": lambda: Concater(source(4), source(3), source(2)),
    "Zipper": lambda: Zipper(source(5), Mapper(source(7), double)),
    "Multiplexer": lambda: Multiplexer(source(5), Mapper(source(4), double), source(6)),
    "GreedyJoiner": lambda: GreedyJoiner(source(5), Mapper(source(3), double)),
    "Forker": lambda: Zipper(*Forker(source(8), 3).outputs),
    "Forker/uneven": lambda: Concater(*Forker(source(6), 2).outputs),
    "Demultiplexer": lambda: Multiplexer(*Demultiplexer(source(15), 3, mod3).outputs),
    "Demultiplexer/concat": lambda: Concater(*Demultiplexer(source(9), 2, is_odd).outputs),
    "Shuffler": lambda: Shuffler(source(20), buffer_size=6).set_seed(7),
    # buffers holding batch()'s DataChunks (torch's test_simple_snapshot_graph)
    "Shuffler/batches": lambda: Shuffler(Batcher(source(20), 2), buffer_size=4).set_seed(7),
    "Forker/batches": lambda: Concater(*Forker(Batcher(source(8), 2), 2).outputs),
    "Demultiplexer/batches": lambda: Concater(
        *Demultiplexer(Batcher(source(12), 2), 2, batch_parity).outputs
    ),
    "Batcher/batches": lambda: Batcher(Batcher(source(12), 2), 3),
    "UnBatcher/batches": lambda: UnBatcher(Batcher(Batcher(source(12), 2), 3)),
    "Multiplexer/batches": lambda: Multiplexer(Batcher(source(8), 2), Batcher(source(9), 3)),
    "Prefetcher/batches": lambda: Prefetcher(
        Shuffler(Batcher(source(12), 2), buffer_size=3).set_seed(1), 2, snapshot_every=2
    ),
    "ProcessRunner/batches": lambda: ProcessRunner(
        Shuffler(Batcher(source(8), 2), buffer_size=3).set_seed(2), 2
    ),
    "Shuffler/off": lambda: Shuffler(source(5)).set_shuffle(False),
    "Sampler": lambda: Sampler(source(7)),
    "ShardingFilter": sharded,
    "Cycler": lambda: Cycler(source(4), 3),
    "Repeater": lambda: Repeater(source(4), 3),
    "InMemoryCacheHolder/fill": lambda: InMemoryCacheHolder(source(8)),
    "InMemoryCacheHolder/replay": cached_second_pass,
    "Prefetcher": lambda: Prefetcher(Mapper(source(10), double), 3),
    "Prefetcher/snapshot_every": lambda: Prefetcher(source(10), 4, snapshot_every=3),
    "ProcessRunner": lambda: ProcessRunner(Shuffler(source(8), buffer_size=3).set_seed(2), 2),
    "IterToMapConverter": lambda: MapToIterConverter(
        IterToMapConverter(IterableWrapper([(i, i * i) for i in range(6)]))
    ),
    "MapToIterConverter": lambda: MapToIterConverter(SequenceWrapper(range(6)), [5, 1, 3]),
    "map Shuffler": lambda: MapShuffler(SequenceWrapper(range(10))).set_seed(5),
    "map Mapper/Batcher": lambda: MapToIterConverter(
        MapBatcher(MapMapper(SequenceWrapper(range(7)), double), 3)
    ),
    "map Concater/Zipper": lambda: MapToIterConverter(
        MapZipper(
            MapConcater(SequenceWrapper(range(3)), SequenceWrapper(range(4))),
            SequenceWrapper("abcdefg"),
        )
    ),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_state_roundtrip(name: str) -> None:
    expected = check_state_roundtrip(GRAPHS[name], normalize=typed)
    assert expected, "the graph should yield something"


def test_state_is_small_and_versioned() -> None:
    dp = Shuffler(source(1000), buffer_size=4).set_seed(1)
    it = iter(dp)
    next(it)
    state = dp.state_dict()
    assert state["version"] == 1
    assert isinstance(state["rng"], int)
    assert len(state["buffer"]) == 4


def test_loading_a_foreign_version_fails_clearly() -> None:
    dp = Mapper(source(), double)
    dp.load_state_dict({"version": 99, "source": {"version": 1, "index": 0}})
    with pytest.raises(ValueError, match="version 99"):
        next(iter(dp))


def test_fresh_state_restarts() -> None:
    dp = Mapper(source(3), double)
    state = dp.state_dict()
    other = Mapper(source(3), double)
    other.load_state_dict(state)
    assert list(other) == [0, 2, 4]
