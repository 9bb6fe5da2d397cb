"""Read-ahead against SeaweedFS behind the latency proxy: same bytes, fewer round trips waited."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any
from urllib.parse import urlparse

import pytest
from latency_proxy import LinkSettings, ProxyProcess
from remote_servers import BUCKET, S3Server

from conveyor.storage import RangedReader, RemoteOptions, get_filesystem, open_early

BLOCK = 256 << 10
BLOB_BYTES = 16 * BLOCK + 1234  # 16 full blocks and a short one
URL = f"s3://{BUCKET}/readahead/blob.bin"


@pytest.fixture(scope="module")
def blob(s3_server: S3Server) -> bytes:
    data = os.urandom(BLOB_BYTES)
    get_filesystem("s3://", s3_server.storage_options).fs.pipe(URL, data)
    return data


@pytest.fixture
def slow_options(s3_server: S3Server) -> Iterator[tuple[dict[str, Any], float]]:
    rtt = 0.1
    with ProxyProcess(str(urlparse(s3_server.endpoint).netloc), LinkSettings(rtt=rtt)) as proxy:
        options = dict(s3_server.storage_options)
        options["client_kwargs"] = {"endpoint_url": proxy.endpoint, "region_name": "us-east-1"}
        yield options, rtt


def _timed_read(open_stream: Any) -> tuple[float, bytes]:
    start = time.perf_counter()
    parts = []
    with open_stream() as stream:
        while part := stream.read(64 << 10):  # a tar reader's small reads, not one big one
            parts.append(part)
    return time.perf_counter() - start, b"".join(parts)


def _wait_for_window(stream: RangedReader) -> None:
    """Until every block an (early-opened, unread) stream has asked for is in."""
    tasks = [block.task for block in stream._blocks.values()]
    _, missing = futures.wait([t for t in tasks if t is not None], timeout=10)
    assert not missing, "the early blocks never arrived"


def test_read_ahead_reads_the_same_bytes_in_fewer_waited_round_trips(
    blob: bytes, slow_options: tuple[dict[str, Any], float]
) -> None:
    options, rtt = slow_options
    one_at_a_time = get_filesystem(URL, options, RemoteOptions(read_ahead=0))
    ahead = get_filesystem(URL, options, RemoteOptions(read_ahead=4))
    with one_at_a_time.open(URL, BLOCK) as plain_stream, ahead.open(URL, BLOCK) as ahead_stream:
        assert isinstance(plain_stream, RangedReader) and plain_stream.max_depth == 1
        assert isinstance(ahead_stream, RangedReader) and ahead_stream.depth == 4
    # one GET per block, each waited for in turn (~17 round trips)
    plain_s, plain = _timed_read(lambda: one_at_a_time.open(URL, BLOCK))
    ahead_s, fetched = _timed_read(lambda: ahead.open(URL, BLOCK))
    assert plain == blob
    assert fetched == blob
    assert plain_s >= 16 * rtt, plain_s
    # four blocks in flight: about a quarter of the round trips are waited for
    assert ahead_s < 0.6 * plain_s, (ahead_s, plain_s)


def test_an_object_opened_early_is_read_before_it_is_used(
    blob: bytes, slow_options: tuple[dict[str, Any], float]
) -> None:
    options, rtt = slow_options
    remote = RemoteOptions(read_ahead=2)
    with get_filesystem(URL, options, remote).open(URL, BLOCK) as current:
        current.read(1)
        early = open_early(URL, options, BLOCK, remote, after=current)
        assert isinstance(early, RangedReader)
    with early:
        _wait_for_window(early)
        start = time.perf_counter()
        first = early.read(64 << 10)
        assert time.perf_counter() - start < rtt / 2  # no round trip left to wait for
    assert first == blob[: 64 << 10]


def test_an_early_objects_whole_window_is_in_before_it_is_used(
    blob: bytes, slow_options: tuple[dict[str, Any], float]
) -> None:
    """Not only the first block: the next shard must not ramp up after the boundary."""
    options, rtt = slow_options
    depth = 3
    remote = RemoteOptions(read_ahead=depth)
    with get_filesystem(URL, options, remote).open(URL, BLOCK) as current:
        current.read(1)
        early = open_early(URL, options, BLOCK, remote, after=current)
        assert isinstance(early, RangedReader)
    with early:
        # read_ahead, or the host's learnt width (a first answer 2 round trips late widens it)
        width = early.depth
        assert width >= depth and sorted(early._blocks) == list(range(width))
        _wait_for_window(early)
        start = time.perf_counter()
        window = early.read(width * BLOCK)
        assert time.perf_counter() - start < rtt / 2  # the whole window was already here
    assert window == blob[: width * BLOCK]
