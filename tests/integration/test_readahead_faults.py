"""Read-ahead against servers that misbehave: the same guarantees as one request at a time.

With read-ahead several ranges of an object are in flight at once, so which request meets
a scripted fault depends on arrival order; these tests check what must hold whatever the
order: every sample exactly once, retries that continue at the byte reached (never from
the start of the object), the final errors and their time bounds.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pytest
from remote_servers import Fault, FaultyServer, ShardSet
from test_remote_faults import FAST, SLACK_S, failure_of, read_keys, shard_keys, shard_path

from conveyor.storage import RangedReader, RemoteOptions, RemoteReadError, get_filesystem

pytestmark = pytest.mark.timeout(90)

AHEAD = dataclasses.replace(FAST, read_ahead=4)
BLOCK = 4096


@pytest.fixture
def faulty(shard_set: ShardSet, fsspec_loop: None) -> Iterator[FaultyServer]:
    server = FaultyServer(shard_set.root)
    try:
        yield server
    finally:
        server.close()


def test_shards_are_read_ahead_by_default(faulty: FaultyServer, shard_set: ShardSet) -> None:
    url = faulty.url + shard_path(shard_set, 0)
    with get_filesystem(url, None, RemoteOptions()).open(url, BLOCK) as stream:
        assert isinstance(stream, RangedReader) and stream.depth == RemoteOptions().read_ahead


def test_a_hanging_server_fails_within_the_read_timeout(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    path = shard_path(shard_set, 0)
    faulty.script(path, *[Fault("hang")] * 3)
    error, elapsed = failure_of([faulty.url + path], remote=AHEAD)
    cause = error.__cause__
    assert isinstance(cause, RemoteReadError) and cause.attempts == 3
    assert "no data within 0.5 s" in str(error) and faulty.ranges(path) == [0, 0, 0]
    assert elapsed <= 3 * AHEAD.read_timeout_s + 3 * AHEAD.backoff_max_s + SLACK_S


def test_500_then_200_delivers_every_sample_once(faulty: FaultyServer, shard_set: ShardSet) -> None:
    path = shard_path(shard_set, 2)
    faulty.script(path, Fault("status", 500), Fault("status", 503))
    keys = read_keys([faulty.url + path], remote=AHEAD, block_size=BLOCK)
    assert keys == shard_keys(shard_set, 2)
    assert faulty.ranges(path)[:3] == [0, 0, 0]  # the first block is asked alone


def test_500_for_good_is_reported_with_status_and_url(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    path = shard_path(shard_set, 2)
    faulty.script(path, *[Fault("status", 500)] * 3)
    error, _ = failure_of([faulty.url + path], remote=AHEAD)
    cause = error.__cause__
    assert isinstance(cause, RemoteReadError) and not isinstance(cause, FileNotFoundError)
    assert cause.status == 500 and cause.url == faulty.url + path


@pytest.mark.parametrize("kind", ["stall", "close", "reset"])
def test_a_block_cut_mid_body_continues_at_the_byte_reached(
    faulty: FaultyServer, shard_set: ShardSet, kind: str
) -> None:
    path = shard_path(shard_set, 3)
    # the first block comes whole; one of the blocks then in flight is cut after 1000 bytes
    faulty.script(path, Fault("serve"), Fault(kind, after=1000))
    started = time.monotonic()
    keys = read_keys([faulty.url + path], remote=AHEAD, block_size=BLOCK)
    assert keys == shard_keys(shard_set, 3)
    ranges = faulty.ranges(path)
    size = (shard_set.root / path.removeprefix("/")).stat().st_size
    blocks = list(range(0, size, BLOCK))
    # every block with data was asked for (the last may hold only the end-of-archive zeros,
    # which the reader may stop before)
    assert set(blocks[:-1]) <= set(ranges)
    retries = [start for start in ranges if start % BLOCK]
    assert ranges.count(0) == 1  # nothing was read again from the start
    # one retry: the cut block asked again from the byte reached (up to 1000 bytes in), or
    # whole when nothing of it had arrived (how much arrives before a reset is the kernel's)
    aligned = [start for start in ranges if start % BLOCK == 0]
    assert len(retries) + len(aligned) - len(set(aligned)) == 1
    assert all(start % BLOCK <= 1000 for start in retries)
    if kind == "stall":
        assert retries and time.monotonic() - started >= AHEAD.read_timeout_s


def test_a_missing_object_is_a_missing_file(faulty: FaultyServer) -> None:
    error, _ = failure_of([f"{faulty.url}/shards/nope.tar"], remote=AHEAD)
    assert isinstance(error.__cause__, FileNotFoundError) and "HTTP 404" in str(error)
    assert faulty.ranges("/shards/nope.tar") == [0]


def test_the_next_shard_is_asked_for_while_the_current_one_is_read(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    from conveyor.datapipes.iter.loading import TarShards

    first, second = (shard_path(shard_set, i) for i in (4, 5))
    samples = iter(TarShards([faulty.url + first, faulty.url + second], decode=None, remote=AHEAD))
    assert next(samples)["__key__"] == shard_keys(shard_set, 4)[0]
    deadline = time.monotonic() + 10
    while not faulty.ranges(second):  # requested on the event loop, soon after the hint
        assert time.monotonic() < deadline, "the next shard was never asked for"
        time.sleep(0.01)
    assert faulty.ranges(second) == [0]
    # the hint waited for the first shard's first block (it was named before that opened)
    gets = [path for method, path, _ in list(faulty.log) if method == "GET"]
    assert gets.index(first) < gets.index(second)
    rest = [sample["__key__"] for sample in samples]
    assert rest == shard_keys(shard_set, 4)[1:] + shard_keys(shard_set, 5)
    assert faulty.ranges(second) == [0]  # the hinted read was used, not asked again
