"""Tar shards streamed from real servers: HTTP (ranged GETs) and SeaweedFS S3, via fsspec."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import torch
from remote_servers import HttpServer, S3Server, ShardSet

import conveyor
from conveyor.datapipes.iter.loading import FileLister, TarShards
from conveyor.formats import BadSampleWarning, SampleError
from conveyor.storage import RemoteOptions, RemoteReadError, ShardCache

pytestmark = pytest.mark.timeout(60)


def http_urls(server: HttpServer, shard_set: ShardSet, prefix: str = "") -> list[str]:
    return [f"{server.url}/{prefix}shards/{os.path.basename(p)}" for p in shard_set.paths]


def keys_of(pipe: Any) -> list[str]:
    return [sample["__key__"] for sample in pipe]


def member_offset(state: dict[str, Any]) -> int:
    """The byte offset in the current shard where reading resumes (TarShards' state)."""
    return int(state["offset"])


def label_and_pixels(sample: dict[str, Any]) -> tuple[torch.Tensor, int]:
    return sample["jpg"][:, :8, :8], sample["cls"]


def test_http_stream_matches_local(http_server: HttpServer, shard_set: ShardSet) -> None:
    http_server.requests.clear()
    remote = list(TarShards(http_urls(http_server, shard_set), decode=None, block_size=8192))
    local = list(TarShards(shard_set.paths, decode=None))
    assert [{k: v for k, v in s.items() if k != "__url__"} for s in remote] == [
        {k: v for k, v in s.items() if k != "__url__"} for s in local
    ]
    assert remote[0]["__url__"].startswith("http://127.0.0.1")
    ranged = [r for method, _, r in http_server.requests if method == "GET" and r]
    assert len(ranged) > len(shard_set.paths)  # several small ranged reads per shard
    assert all(r for method, _, r in http_server.requests if method == "GET")  # no full GET


def test_http_resume_reads_from_the_saved_offset(
    http_server: HttpServer, shard_set: ShardSet
) -> None:
    urls = http_urls(http_server, shard_set)
    # The first pipe does not hedge: a hedge (a second request for a block whose first
    # byte was late, cancelled once the first answer won) may reach a loaded server's log
    # after clear() below, and a block the first pipe read looked like a replay. Blocks
    # of its read-ahead cancelled by close() may still be logged late: they lie ahead.
    pipe = TarShards(urls, decode=None, block_size=4096, remote=RemoteOptions(hedge_budget=0))
    it = iter(pipe)
    head = [next(it)["__key__"] for _ in range(21)]  # into the third shard
    state = pipe.state_dict()
    pipe.close()
    offset = member_offset(state)
    assert offset > 0
    http_server.requests.clear()
    resumed = TarShards(urls, decode=None, block_size=4096)
    resumed.load_state_dict(state)
    assert head + keys_of(resumed) == shard_set.keys
    third = [r for _, path, r in http_server.requests if path.endswith("part-002.tar") and r]
    starts = [int(r.split("=")[1].split("-")[0]) for r in third]
    # no replay: nothing before the saved offset's block is read again
    assert starts and min(starts) >= offset - 4096, (offset, third)


def test_http_listing_and_slow_response(http_server: HttpServer, shard_set: ShardSet) -> None:
    listed = list(FileLister(f"{http_server.url}/shards/", "*.tar"))
    assert [u.rsplit("/", 1)[-1] for u in listed] == [os.path.basename(p) for p in shard_set.paths]
    slow = http_urls(http_server, shard_set, prefix="slow/0.2/")[:2]
    assert keys_of(TarShards(slow, decode=None)) == shard_set.keys[:16]


def test_http_timeout_and_server_error(http_server: HttpServer, shard_set: ShardSet) -> None:
    good = http_urls(http_server, shard_set)
    failing = http_urls(http_server, shard_set, prefix="fail/")[0]
    hanging = http_urls(http_server, shard_set, prefix="slow/1/")[1]
    options = {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=0.3)}}  # the user's own
    remote = RemoteOptions(retries=1, backoff_s=0.0)
    with pytest.raises(SampleError, match="HTTP 500") as caught:
        list(TarShards([good[0], failing], decode=None, remote=remote))
    assert caught.value.url == failing and isinstance(caught.value.__cause__, RemoteReadError)
    with pytest.raises(SampleError, match="timed out") as caught:
        list(TarShards([hanging], decode=None, storage_options=options, remote=remote))
    assert caught.value.url == hanging
    pipe = TarShards(
        [good[2], failing, hanging],
        decode=None,
        storage_options=options,
        on_error="skip",
        remote=remote,
    )
    with pytest.warns(BadSampleWarning, match=r"skipped 16 bad sample\(s\), 16 of them estimated"):
        assert keys_of(pipe) == shard_set.keys[16:24]
    assert pipe.errors.records == 2 and {e.url for e in pipe.errors.examples} == {failing, hanging}


def test_http_with_dataloader_workers(http_server: HttpServer, shard_set: ShardSet) -> None:
    pipe = TarShards(http_urls(http_server, shard_set), shuffle=True, shuffle_buffer=8)
    loader = conveyor.DataLoader(pipe.map(label_and_pixels), batch_size=5, num_workers=2)
    labels = [int(y) for _, batch in loader for y in batch]
    assert sorted(labels) == list(range(48))


def test_s3_listing_and_ranged_reads(s3_server: S3Server, shard_set: ShardSet) -> None:
    listed = list(
        FileLister("s3://conveyor-test/shards", "*.tar", storage_options=s3_server.storage_options)
    )
    assert listed == s3_server.shard_urls
    pipe = TarShards(
        "s3://conveyor-test/shards/part-{000..005}.tar",
        decode=None,
        storage_options=s3_server.storage_options,
        block_size=4096,  # many ranged GETs per shard
    )
    it = iter(pipe)
    head = [next(it)["__key__"] for _ in range(13)]
    state = pipe.state_dict()
    pipe.close()
    resumed = TarShards(
        s3_server.shard_urls, decode=None, storage_options=s3_server.storage_options
    )
    resumed.load_state_dict(state)
    assert head + keys_of(resumed) == shard_set.keys


def test_s3_with_dataloader_workers(s3_server: S3Server) -> None:
    pipe = TarShards(
        "s3://conveyor-test/shards/*.tar",
        storage_options=s3_server.storage_options,
        shuffle=True,
    )
    loader = conveyor.DataLoader(pipe.map(label_and_pixels), batch_size=6, num_workers=2)
    counts: Counter[int] = Counter()
    for images, labels in loader:
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, 8, 8)
        counts.update(int(y) for y in labels)
    assert counts == Counter(range(48))


def test_s3_cache(s3_server: S3Server, shard_set: ShardSet, tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "cache", max_bytes=100_000_000)
    pipe = TarShards(
        s3_server.shard_urls, decode=None, storage_options=s3_server.storage_options, cache=cache
    )
    assert keys_of(pipe) == shard_set.keys
    assert (cache.hits, cache.misses) == (0, 6)
    assert keys_of(pipe) == shard_set.keys
    assert (cache.hits, cache.misses) == (6, 6)
    sizes = sorted(os.path.getsize(p) for p in shard_set.paths)
    options = s3_server.storage_options  # part of the key: the endpoint identifies the object
    entries = [cache.entry_path(url, options) for url in s3_server.shard_urls]
    assert sorted(os.path.getsize(entry) for entry in entries) == sizes


def test_s3_missing_object(s3_server: S3Server) -> None:
    missing = "s3://conveyor-test/shards/nope.tar"
    with pytest.raises(SampleError, match=r"cannot open.*NoSuchKey") as caught:
        list(TarShards([missing], storage_options=s3_server.storage_options))
    assert caught.value.url == missing and isinstance(caught.value.__cause__, FileNotFoundError)
