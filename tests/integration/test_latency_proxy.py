"""The latency proxy (S7's slow network) really adds round trips, windows and bandwidth caps.

Each test times real HTTP requests to SeaweedFS through a proxy process. Lower bounds are
strict (the proxy must never be faster than the modelled network); upper bounds leave
room for a loaded machine.
"""

from __future__ import annotations

import http.client
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import pytest
from latency_proxy import LinkSettings, ProxyProcess
from remote_servers import BUCKET, S3Server

from conveyor.datapipes.iter import TarShards
from conveyor.storage import get_filesystem

BLOB_BYTES = 2_000_000
BLOB = f"/{BUCKET}/latency/blob.bin"
SLACK_S = 0.25  # scheduling noise on a shared 2-core machine


@pytest.fixture(scope="module")
def blob(s3_server: S3Server) -> bytes:
    data = os.urandom(BLOB_BYTES)
    get_filesystem("s3://", s3_server.storage_options).fs.pipe(BLOB.lstrip("/"), data)
    return data


def _upstream(server: S3Server) -> str:
    return str(urlparse(server.endpoint).netloc)


def _get(connection: http.client.HTTPConnection, path: str, first: int | None = None) -> bytes:
    headers = {} if first is None else {"Range": f"bytes=0-{first - 1}"}
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    body = response.read()
    assert response.status in (200, 206), response.status
    return body


def _timed_get(port: int, path: str) -> tuple[float, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        start = time.perf_counter()
        body = _get(connection, path)
        return time.perf_counter() - start, body
    finally:
        connection.close()


@pytest.fixture
def proxies() -> Iterator[list[ProxyProcess]]:
    started: list[ProxyProcess] = []
    yield started
    for proxy in started:
        proxy.close()


def _proxy(started: list[ProxyProcess], server: S3Server, **settings: object) -> ProxyProcess:
    proxy = ProxyProcess(_upstream(server), LinkSettings(**settings))  # type: ignore[arg-type]
    started.append(proxy)
    return proxy


def test_a_request_costs_one_rtt_and_a_new_connection_one_more(
    s3_server: S3Server, blob: bytes, proxies: list[ProxyProcess]
) -> None:
    rtt = 0.1
    proxy = _proxy(proxies, s3_server, rtt=rtt)
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    try:
        start = time.perf_counter()
        assert _get(connection, BLOB, first=100) == blob[:100]
        first = time.perf_counter() - start
        start = time.perf_counter()
        assert _get(connection, BLOB, first=100) == blob[:100]
        again = time.perf_counter() - start
    finally:
        connection.close()
    assert 2 * rtt <= first < 2 * rtt + SLACK_S, first  # handshake + request/response
    assert rtt <= again < rtt + SLACK_S, again  # the connection is reused: one round trip


def test_a_zero_rtt_proxy_is_transparent(
    s3_server: S3Server, blob: bytes, proxies: list[ProxyProcess]
) -> None:
    proxy = _proxy(proxies, s3_server)
    seconds, body = _timed_get(proxy.port, BLOB)
    assert body == blob
    assert seconds < SLACK_S


def test_bandwidth_cap_per_connection_and_shared(
    s3_server: S3Server, blob: bytes, proxies: list[ProxyProcess]
) -> None:
    rate, burst = 4e6, 64 << 10
    floor = (BLOB_BYTES - burst) / rate  # 0.48 s for one 2 MB download
    alone = _proxy(proxies, s3_server, bandwidth=rate, burst=burst)
    seconds, body = _timed_get(alone.port, BLOB)
    assert body == blob
    assert floor <= seconds < 1.5 * floor + SLACK_S, seconds

    for shared in (False, True):
        proxy = _proxy(proxies, s3_server, bandwidth=rate, burst=burst, shared=shared)
        start = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(_timed_get, [proxy.port] * 2, [BLOB] * 2))
        wall = time.perf_counter() - start
        assert all(body == blob for _, body in results)
        if shared:  # one link: two downloads take twice as long as one
            assert 2 * floor <= wall < 3 * floor + SLACK_S, wall
        else:  # a bucket each: side by side in about the time of one
            assert floor <= wall < 1.5 * floor + SLACK_S, wall


def test_the_window_limits_one_stream_to_window_per_rtt(
    s3_server: S3Server, blob: bytes, proxies: list[ProxyProcess]
) -> None:
    rtt, window = 0.1, 256 << 10
    proxy = _proxy(proxies, s3_server, rtt=rtt, window=window)
    seconds, body = _timed_get(proxy.port, BLOB)
    assert body == blob
    windows = BLOB_BYTES / window  # about 7.6 windows, each waits a round trip for its ack
    floor = 2 * rtt + (windows - 1) * rtt
    assert floor <= seconds < 1.5 * floor + SLACK_S, seconds


def test_tar_shards_read_through_a_slow_network_match_the_local_shards(
    s3_server: S3Server, proxies: list[ProxyProcess]
) -> None:
    proxy = _proxy(proxies, s3_server, rtt=0.025, bandwidth=50e6)
    options = {**s3_server.storage_options, "client_kwargs": {"endpoint_url": proxy.endpoint}}
    options["client_kwargs"]["region_name"] = "us-east-1"
    direct = list(TarShards(s3_server.shard_urls, decode=None, **_options(s3_server)))
    slow = list(TarShards(s3_server.shard_urls, decode=None, storage_options=options))
    assert len(slow) == 48
    assert [(s["__key__"], s["jpg"], s["cls"]) for s in slow] == [
        (s["__key__"], s["jpg"], s["cls"]) for s in direct
    ]


def _options(server: S3Server) -> dict[str, object]:
    return {"storage_options": server.storage_options}
