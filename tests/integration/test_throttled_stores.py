"""Stores that say "slow down": Retry-After in both forms, S3 SlowDown, one limit per host.

A real HTTP server (`FaultyServer`) answers 429 or 503 with ``Retry-After`` as scripted, or
429 to every request over a concurrency limit; a real SeaweedFS sits behind the latency
proxy, which answers S3's ``503 SlowDown`` above a request rate. The reads must wait what
the server asks (not the short backoff of a failure), must not give up on a store that is
only busy, must count every throttle in ``stats()``, and the readers of one process must
share one concurrency limit per host, so that throttling stops instead of repeating.
"""

from __future__ import annotations

import dataclasses
import email.utils
import math
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import fsspec.asyn
import pytest
from latency_proxy import LinkSettings, ProxyProcess
from remote_servers import Fault, FaultyServer, S3Server, ShardSet
from test_remote_faults import FAST, shard_keys, shard_path

from conveyor import DataLoader
from conveyor.datapipes.iter import TarShards
from conveyor.storage import RemoteOptions, open_url, request_counts
from conveyor.storage.host_limits import host_limit

pytestmark = pytest.mark.timeout(120)

SLACK_S = 3.0


@pytest.fixture
def faulty(shard_set: ShardSet, fsspec_loop: None) -> Iterator[FaultyServer]:
    server = FaultyServer(shard_set.root)
    try:
        yield server
    finally:
        server.close()


def _epoch(urls: list[str], num_workers: int, **options: Any) -> tuple[list[str], Any, float]:
    options.setdefault("remote", FAST)
    pipe = TarShards(urls, decode=None, **options)
    loader = DataLoader(pipe, batch_size=None, num_workers=num_workers)
    started = time.monotonic()
    keys = [sample["__key__"] for sample in loader]
    return keys, loader.stats(), time.monotonic() - started


@pytest.mark.parametrize("num_workers", [0, 2])
def test_retry_after_in_seconds_is_waited_out_and_counted(
    faulty: FaultyServer, shard_set: ShardSet, num_workers: int
) -> None:
    path = shard_path(shard_set, 0)
    faulty.script(path, Fault("status", 429, headers=(("Retry-After", "1"),)))
    urls = [faulty.url + shard_path(shard_set, i) for i in range(2)]
    keys, stats, elapsed = _epoch(urls, num_workers)
    assert sorted(keys) == shard_keys(shard_set, 0) + shard_keys(shard_set, 1)
    assert elapsed >= 1.0  # the second asked for, not the 0.05 s backoff of FAST
    assert faulty.ranges(path)[:2] == [0, 0]
    assert stats.requests.throttled == 1 and stats.requests.failed == 1
    assert "throttled 1" in stats.summary()


def test_retry_after_as_an_http_date_is_waited_out(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    path = shard_path(shard_set, 1)
    when = math.ceil(time.time()) + 2  # an HTTP date has whole seconds
    date = email.utils.formatdate(when, usegmt=True)
    faulty.script(path, Fault("status", 503, headers=(("Retry-After", date),)))
    keys, stats, _ = _epoch([faulty.url + path], 0)
    assert keys == shard_keys(shard_set, 1)
    assert time.time() >= when - 0.05  # not before the date the server named
    assert stats.requests.throttled == 1


def test_a_retry_after_beyond_the_budget_fails_at_once_naming_it(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    from conveyor.formats import SampleError

    path = shard_path(shard_set, 2)
    faulty.script(path, Fault("status", 429, headers=(("Retry-After", "3600"),)))
    started = time.monotonic()
    with pytest.raises(SampleError) as caught:
        _epoch([faulty.url + path], 0)
    assert time.monotonic() - started < SLACK_S
    assert "asked to wait 3.6e+03 s" in str(caught.value) and path in str(caught.value)


def test_throttles_do_not_spend_the_retries(faulty: FaultyServer, shard_set: ShardSet) -> None:
    path = shard_path(shard_set, 3)
    throttle = Fault("status", 429, headers=(("Retry-After", "0"),))
    faulty.script(path, *[throttle] * 6)  # three times FAST's retries, in a row
    keys, stats, _ = _epoch([faulty.url + path], 0)
    assert keys == shard_keys(shard_set, 3) and stats.requests.throttled == 6


def _blobs(root: Path, count: int, size: int) -> list[bytes]:
    blobs = [os.urandom(size) for _ in range(count)]
    for index, blob in enumerate(blobs):
        (root / f"blob-{index}.bin").write_bytes(blob)
    return blobs


def test_the_threads_of_a_process_share_one_limit_per_host(
    tmp_path: Path, fsspec_loop: None
) -> None:
    """Three readers with four blocks in flight each, against a server that throttles
    every request over two at once: with one limit per host the throttles stop; with a
    limit per reader (or none) three readers keep at least three requests in flight."""
    blobs = _blobs(tmp_path, 3, 80 << 10)
    server = FaultyServer(tmp_path)
    server.max_in_flight, server.delay_s = 2, 0.01
    remote = dataclasses.replace(FAST, read_ahead=4, retries=8)
    before = request_counts()
    try:
        urls = [f"{server.url}/blob-{i}.bin" for i in range(3)]

        def read(url: str) -> bytes:
            with open_url(url, block_size=8192, remote=remote) as stream:
                return stream.read()

        with ThreadPoolExecutor(3) as pool:
            assert list(pool.map(read, urls)) == blobs
    finally:
        server.close()
    counted = request_counts() - before
    assert counted.throttled == server.throttled > 0
    # 30 blocks: once the shared limit has settled, throttles are the AIMD's occasional probe
    assert server.throttled <= 0.15 * (counted.requests - server.throttled), counted
    limit = host_limit(urlparse(server.url).netloc, fsspec.asyn.get_loop())
    assert limit.cuts >= 1 and limit.allowed <= 4


def test_s3_slow_down_is_ridden_out_and_counted(s3_server: S3Server, shard_set: ShardSet) -> None:
    """SeaweedFS behind a proxy answering ``503 SlowDown`` (no Retry-After) above 40
    requests a second: every sample arrives once, with one retry allowed per failure."""
    upstream = str(urlparse(s3_server.endpoint).netloc)
    settings = LinkSettings(requests_per_s=40.0, throttle_status=503, retry_after="none")
    with ProxyProcess(upstream, settings) as proxy:
        options = dict(s3_server.storage_options)
        options["client_kwargs"] = {"endpoint_url": proxy.endpoint, "region_name": "us-east-1"}
        remote = RemoteOptions(retries=1, backoff_s=0.05, backoff_max_s=0.5, retry_budget_s=30)
        keys, stats, _ = _epoch(
            s3_server.shard_urls, 2, storage_options=options, remote=remote, block_size=2048
        )
    assert sorted(keys) == shard_set.keys
    assert stats.requests.throttled > 0
    assert stats.requests.requests >= stats.requests.throttled
