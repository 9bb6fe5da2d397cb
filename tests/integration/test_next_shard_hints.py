"""The next-shard hint travels down the graph, so every consumer keeps its own early read.

Each consumer (a worker thread, a worker process, a rank) reads every n-th shard and opens
its next shard while it reads the current one. The hint goes from `ShardLister` to
``open_files`` with the URL it yields; a per-process registry would let consumers that
share a process (thread workers) cancel each other's early reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from remote_servers import FaultyServer, ShardSet
from test_readahead_faults import AHEAD
from test_remote_faults import shard_keys, shard_path

from conveyor import DataLoader
from conveyor.datapipes.iter import TarShards
from conveyor.graph_settings import apply_sharding

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def faulty(shard_set: ShardSet, fsspec_loop: None) -> Iterator[FaultyServer]:
    server = FaultyServer(shard_set.root)
    try:
        yield server
    finally:
        server.close()


def _first_gets(server: FaultyServer, path: str) -> int:
    return server.ranges(path).count(0)


def test_two_consumers_in_one_process_each_keep_their_next_shard(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    """Consumer 0 reads shards 0, 2; consumer 1 shards 1, 3, in one thread: both next
    shards are read early, neither early read is dropped, nothing is asked twice."""
    urls = [faulty.url + shard_path(shard_set, i) for i in range(4)]
    consumers = []
    for index in range(2):
        pipe = TarShards(urls, decode=None, remote=AHEAD)
        apply_sharding(pipe, 2, index)
        consumers.append(iter(pipe))
    firsts = [next(consumer)["__key__"] for consumer in consumers]  # both hint their next
    assert firsts == [shard_keys(shard_set, 0)[0], shard_keys(shard_set, 1)[0]]
    deadline = time.monotonic() + 10
    for index in (2, 3):  # each consumer's next shard is being read before it is opened
        while not _first_gets(faulty, shard_path(shard_set, index)):
            assert time.monotonic() < deadline, f"shard {index} was never read early"
            time.sleep(0.01)
    rests = [[sample["__key__"] for sample in consumer] for consumer in consumers]
    assert rests[0] == shard_keys(shard_set, 0)[1:] + shard_keys(shard_set, 2)
    assert rests[1] == shard_keys(shard_set, 1)[1:] + shard_keys(shard_set, 3)
    for index in range(4):  # every early read was the one used: no shard asked twice
        assert _first_gets(faulty, shard_path(shard_set, index)) == 1, index


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_workers_read_their_next_shards_early_and_every_shard_once(
    faulty: FaultyServer, shard_set: ShardSet, worker_type: str
) -> None:
    urls = [faulty.url + shard_path(shard_set, i) for i in range(6)]
    pipe = TarShards(urls, decode=None, remote=AHEAD)
    loader = DataLoader(pipe, batch_size=None, num_workers=2, worker_type=worker_type)
    keys = sorted(sample["__key__"] for sample in loader)
    assert keys == shard_set.keys
    for index in range(6):
        assert _first_gets(faulty, shard_path(shard_set, index)) == 1, index
