"""One listing per job: a glob is listed in the main process (rank 0 for every rank) and
handed to the workers with the graph; workers never list, whatever their number or kind.

Counted at the servers: the tests' HTTP server logs every request (fsspec lists an HTTP
"directory" with a few requests of the directory URL), and the latency proxy in front of
SeaweedFS logs every S3 request (a listing is a ``GET /bucket?list-type=2...``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from latency_proxy import LinkSettings, ProxyProcess
from remote_servers import BUCKET, HttpServer, S3Server, ShardSet

from conveyor import DataLoader
from conveyor.datapipes.iter import TarShards

pytestmark = pytest.mark.timeout(240)


def _directory_requests(server: HttpServer) -> list[tuple[str, str, str | None]]:
    return [entry for entry in server.requests if entry[1].endswith("/")]


@pytest.mark.parametrize(
    ("num_workers", "worker_type"), [(0, "process"), (2, "process"), (3, "thread")]
)
def test_an_http_glob_is_listed_once_whatever_the_workers(
    http_server: HttpServer, shard_set: ShardSet, num_workers: int, worker_type: str
) -> None:
    del http_server.requests[:]
    pipe = TarShards(http_server.url + "/shards/part-*.tar", decode=None)
    loader = DataLoader(pipe, batch_size=None, num_workers=num_workers, worker_type=worker_type)
    keys = sorted(sample["__key__"] for sample in loader)
    assert keys == shard_set.keys
    assert loader.stats().requests.listings == 1
    # one fsspec HTTP glob asks the directory 3-4 times (GET, HEAD, GET, GET); a listing
    # per worker would be that many times the workers
    assert 1 <= len(_directory_requests(http_server)) <= 5
    # a second epoch lists nothing: the listing is the job's
    del http_server.requests[:]
    assert sorted(sample["__key__"] for sample in loader) == shard_set.keys
    assert _directory_requests(http_server) == []


def s3_lists(log: Path) -> int:
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return sum("list-type=" in r["target"] or "prefix=" in r["target"] for r in records)


def logging_proxy(server: S3Server, log: Path) -> ProxyProcess:
    upstream = str(urlparse(server.endpoint).netloc)
    return ProxyProcess(upstream, LinkSettings(log=str(log)))


def _options(server: S3Server, endpoint: str) -> dict[str, Any]:
    options = dict(server.storage_options)
    options["client_kwargs"] = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    return options


def test_an_s3_glob_is_one_list_request_with_workers(
    s3_server: S3Server, shard_set: ShardSet, tmp_path: Path
) -> None:
    log = tmp_path / "requests.jsonl"
    with logging_proxy(s3_server, log) as proxy:
        pipe = TarShards(
            f"s3://{BUCKET}/shards/part-*.tar",
            decode=None,
            storage_options=_options(s3_server, proxy.endpoint),
        )
        loader = DataLoader(pipe, batch_size=None, num_workers=2)
        assert sorted(sample["__key__"] for sample in loader) == shard_set.keys
    assert s3_lists(log) == 1
