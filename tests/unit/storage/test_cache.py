"""ShardCache: tee on first read, hits after, atomic entries, LRU eviction by size."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from conveyor.storage import ShardCache, open_url

ROOT = "memory://conveyor-cache-test"


@pytest.fixture
def remote() -> Iterator[dict[str, bytes]]:
    fs = fsspec.filesystem("memory")
    blobs = {f"{ROOT}/{name}.tar": os.urandom(size) for name, size in
             [("a", 300_000), ("b", 300_000), ("c", 300_000), ("big", 3_000_000)]}  # fmt: skip
    for url, data in blobs.items():
        fs.pipe(url, data)
    yield blobs
    fs.rm(ROOT, recursive=True)


def entries(cache: ShardCache) -> list[str]:
    return sorted(n for n in os.listdir(cache.directory) if not n.startswith("."))


def test_first_read_fills_the_cache(tmp_path: Path, remote: dict[str, bytes]) -> None:
    cache = ShardCache(tmp_path / "c", max_bytes=10_000_000)
    url = f"{ROOT}/a.tar"
    with open_url(url, cache=cache) as stream:
        assert stream.read(1000) == remote[url][:1000]
        assert stream.read() == remote[url][1000:]
    assert (cache.hits, cache.misses) == (0, 1)
    assert Path(cache.entry_path(url)).read_bytes() == remote[url]
    fsspec.filesystem("memory").pipe(url, b"changed")  # served from the cache now
    with open_url(url, cache=cache) as stream:
        assert stream.read() == remote[url]
    assert (cache.hits, cache.misses) == (1, 1)
    assert not [n for n in os.listdir(cache.directory) if n.startswith(".tmp-")]


def test_partial_reads(tmp_path: Path, remote: dict[str, bytes]) -> None:
    cache = ShardCache(tmp_path / "c", max_bytes=10_000_000)
    small, big = f"{ROOT}/b.tar", f"{ROOT}/big.tar"
    with open_url(small, cache=cache) as stream:
        stream.read(10)  # closing with < 1 MiB left finishes the copy
    with open_url(big, cache=cache) as stream:
        stream.read(10)  # too much left: no entry
    assert entries(cache) == [os.path.basename(cache.entry_path(small))]
    with open_url(big, cache=cache) as stream:
        stream.seek(2_000_000)  # a jump abandons the copy
        assert stream.read(5) == remote[big][2_000_000:2_000_005]
        stream.read()
    assert len(entries(cache)) == 1
    assert not [n for n in os.listdir(cache.directory) if n.startswith(".tmp-")]


def test_lru_eviction(tmp_path: Path, remote: dict[str, bytes]) -> None:
    cache = ShardCache(tmp_path / "c", max_bytes=700_000)  # room for two 300 kB entries
    a, b, c = (f"{ROOT}/{n}.tar" for n in "abc")
    for url in (a, b):
        with open_url(url, cache=cache) as stream:
            stream.read()
    os.utime(cache.entry_path(a), (1, 1))
    os.utime(cache.entry_path(b), (2, 2))
    with open_url(a, cache=cache) as stream:  # a hit refreshes a
        stream.read()
    with open_url(c, cache=cache) as stream:
        stream.read()
    assert os.path.exists(cache.entry_path(a)) and os.path.exists(cache.entry_path(c))
    assert not os.path.exists(cache.entry_path(b))
    assert cache.usage_bytes() == 600_000


def test_stale_temp_files_are_removed(tmp_path: Path, remote: dict[str, bytes]) -> None:
    cache = ShardCache(tmp_path / "c", max_bytes=10_000_000)
    os.makedirs(cache.directory)
    dead = Path(cache.directory) / ".tmp-999999999-abc"
    dead.write_bytes(b"left by a killed worker")
    with open_url(f"{ROOT}/a.tar", cache=cache) as stream:
        stream.read()
    assert not dead.exists()


def test_local_files_bypass_and_pickling(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "c", max_bytes=1000)
    local = tmp_path / "x.tar"
    local.write_bytes(b"local")
    with open_url(str(local), cache=cache) as stream:
        assert stream.read() == b"local"
    assert cache.misses == 0 and not (tmp_path / "c").exists()
    copy = pickle.loads(pickle.dumps(cache))
    assert (copy.directory, copy.max_bytes) == (cache.directory, 1000)
    with pytest.raises(ValueError, match="max_bytes"):
        ShardCache(tmp_path, 0)


def test_entries_are_keyed_by_endpoint_and_never_by_secrets(tmp_path: Path) -> None:
    """The key holds what identifies the object (URL, endpoint, region) and nothing secret:
    no secret reaches a file name or a record, and new credentials keep the entry."""
    cache = ShardCache(tmp_path / "c", max_bytes=10_000_000)
    url = "s3://bucket/shard.tar"
    a = {"key": "AKIA-never-on-disk", "secret": "s3cr3t-never-on-disk",
         "client_kwargs": {"endpoint_url": "http://a:9000", "region_name": "x"},
         "headers": {"Authorization": "Bearer t0ken-never-on-disk"}}  # fmt: skip
    rotated = {**a, "secret": "another-s3cr3t", "token": "session-t0ken"}
    b = {**a, "client_kwargs": {"endpoint_url": "http://b:9000", "region_name": "x"}}
    assert cache.entry_path(url, a) == cache.entry_path(url, rotated)
    assert cache.entry_path(url, a) != cache.entry_path(url, b) != cache.entry_path(url)
    presigned = "https://h/b/shard.tar?X-Amz-Signature=s1gnature-never-on-disk&x=1"
    assert "never-on-disk" not in cache.entry_path(presigned) + cache.entry_path(url, a)


def test_an_entry_has_a_record_of_its_object(tmp_path: Path, remote: dict[str, bytes]) -> None:
    cache = ShardCache(tmp_path / "c", max_bytes=10_000_000)
    url = f"{ROOT}/a.tar"
    with open_url(url, cache=cache) as stream:
        stream.read()
    records = [n for n in os.listdir(cache.directory) if n.endswith(".meta")]
    assert len(records) == 1
    assert ROOT in (tmp_path / "c" / records[0]).read_text()  # the URL, redacted
