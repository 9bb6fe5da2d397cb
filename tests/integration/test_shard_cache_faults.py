"""The shard cache on a bad day: never a lost sample, never a wrong byte.

Real file-system conditions: a read-only file system and a full one (tmpfs mounts of the
test's own when it runs as root; as another user a read-only directory by ``chmod``, and
no full disk), entries truncated and corrupted on disk, a directory other users can write
(with an entry planted there), and one owned by someone else. Real servers: the tests' HTTP
server on 127.0.0.1, and two SeaweedFS endpoints holding the same bucket and key with
different bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tarfile
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from remote_servers import BUCKET, HttpServer, S3Server, ShardSet
from test_remote_faults import FAST, Weed, loop_executor  # noqa: F401 - a fixture

from conveyor import DataLoader
from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats.skips import drain_skips
from conveyor.storage import ShardCache, open_url
from conveyor.storage.cache import ShardCacheWarning
from conveyor.storage.cache_entries import record_path

pytestmark = pytest.mark.timeout(120)

ROOT = os.geteuid() == 0


@pytest.fixture(autouse=True)
def _empty_sink() -> Iterator[None]:
    drain_skips()
    yield
    drain_skips()


@contextlib.contextmanager
def tmpfs(where: Path, options: str) -> Iterator[Path]:
    """A tmpfs of our own mounted at ``where`` (root only), unmounted afterwards."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@contextlib.contextmanager
def read_only_directory(tmp_path: Path) -> Iterator[Path]:
    """A cache directory that cannot be written: a read-only tmpfs as root (root writes
    through ``chmod``), a ``chmod 500`` directory otherwise."""
    if ROOT:
        with tmpfs(tmp_path / "ro", "ro,mode=0700,size=1m") as directory:
            yield directory
        return
    directory = tmp_path / "ro"
    directory.mkdir(mode=0o700)
    directory.chmod(0o500)
    try:
        yield directory
    finally:
        directory.chmod(0o700)


def http_urls(http_server: HttpServer, shard_set: ShardSet) -> list[str]:
    return [f"{http_server.url}/shards/{os.path.basename(path)}" for path in shard_set.paths]


def epoch(urls: list[str], cache: ShardCache, num_workers: int = 0, **options: Any) -> list[Any]:
    pipe = TarShards(urls, decode=None, cache=cache, remote=FAST, **options)
    loader = DataLoader(pipe, batch_size=None, num_workers=num_workers)
    samples = list(loader)
    assert loader.stats().skipped == 0
    return samples


def source_members(shard_set: ShardSet) -> dict[str, bytes]:
    found = {}
    for path in shard_set.paths:
        with tarfile.open(path) as archive:
            for info in archive:
                extracted = archive.extractfile(info)
                assert extracted is not None
                found[info.name] = extracted.read()
    return found


def assert_exact(samples: list[Any], shard_set: ShardSet) -> None:
    """Every sample once, every byte as in the source shards."""
    assert sorted(s["__key__"] for s in samples) == shard_set.keys
    expected = source_members(shard_set)
    for sample in samples:
        for ext in ("jpg", "cls"):
            assert bytes(sample[ext]) == expected[f"{sample['__key__']}.{ext}"]


@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_read_only_cache_falls_back_to_streaming(
    http_server: HttpServer, shard_set: ShardSet, tmp_path: Path, on_error: str, num_workers: int
) -> None:
    with read_only_directory(tmp_path) as directory, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cache = ShardCache(directory, max_bytes=10 << 20)
        samples = epoch(http_urls(http_server, shard_set), cache, num_workers, on_error=on_error)
    assert_exact(samples, shard_set)
    if num_workers == 0:  # workers warn on their own stderr, once each
        cache_warnings = [w for w in seen if issubclass(w.category, ShardCacheWarning)]
        assert len(cache_warnings) == 1 and "cannot write" in str(cache_warnings[0].message)
        assert cache.bypassed + cache.misses == len(shard_set.paths)


def test_a_full_cache_disk_falls_back_to_streaming(
    http_server: HttpServer, shard_set: ShardSet, tmp_path: Path
) -> None:
    if not ROOT:
        pytest.skip("a full file system needs a small tmpfs, which only root can mount here")
    shard_bytes = os.path.getsize(shard_set.paths[0])
    with tmpfs(tmp_path / "full", f"mode=0700,size={2 * shard_bytes + 4096}") as directory:
        cache = ShardCache(directory, max_bytes=100 << 20)
        with pytest.warns(ShardCacheWarning, match="No space left on device") as seen:
            samples = epoch(http_urls(http_server, shard_set), cache)
        assert_exact(samples, shard_set)
        assert len([w for w in seen if issubclass(w.category, ShardCacheWarning)]) == 1
        names = os.listdir(directory)
        assert not [name for name in names if name.startswith(".tmp-")]
        entries = [name for name in names if not name.startswith(".")]
        assert 1 <= len(entries) < len(shard_set.paths)  # what fitted is whole and served
        again = epoch(http_urls(http_server, shard_set), cache)
        assert_exact(again, shard_set)
        assert cache.hits == len(entries)


@pytest.mark.parametrize("damage", ["truncate", "flip a byte"])
def test_a_damaged_entry_is_fetched_again_never_served(
    http_server: HttpServer, shard_set: ShardSet, tmp_path: Path, damage: str
) -> None:
    urls = http_urls(http_server, shard_set)
    cache = ShardCache(tmp_path / "cache", max_bytes=10 << 20)
    assert_exact(epoch(urls, cache), shard_set)
    entry = Path(cache.entry_path(urls[2]))
    size = entry.stat().st_size
    if damage == "truncate":
        with open(entry, "r+b") as handle:
            handle.truncate(size - 3000)  # cut inside a member
    else:
        with open(entry, "r+b") as handle:  # one byte in the middle changed
            handle.seek(size // 2)
            byte = handle.read(1)
            handle.seek(size // 2)
            handle.write(bytes([byte[0] ^ 0x40]))
    for _ in range(2):  # the next epoch refetches it; the one after reads it from disk
        assert_exact(epoch(urls, cache), shard_set)
    assert cache.rejected == 1 and entry.stat().st_size == size
    assert cache.hits == 2 * len(urls) - 1


def plant(cache: ShardCache, url: str, data: bytes) -> None:
    """An entry as an attacker would write it: bytes and a matching record."""
    path = cache.entry_path(url)
    Path(path).write_bytes(data)
    record = {"version": 1, "url": url, "size": len(data), "crc32": zlib.crc32(data)}
    Path(record_path(path)).write_text(json.dumps(record))


def evil_shard(tmp_path: Path) -> bytes:
    source = tmp_path / "evil"
    source.mkdir()
    (source / "000000.cls").write_text("666")
    with tarfile.open(tmp_path / "evil.tar", "w") as archive:
        archive.add(source / "000000.cls", arcname="000000.cls")
    return (tmp_path / "evil.tar").read_bytes()


def test_a_cache_directory_others_can_write_is_not_used(
    http_server: HttpServer, shard_set: ShardSet, tmp_path: Path
) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)  # as /tmp is: anyone can plant an entry
    urls = http_urls(http_server, shard_set)
    cache = ShardCache(directory, max_bytes=10 << 20)
    plant(cache, urls[0], evil_shard(tmp_path))
    with pytest.warns(ShardCacheWarning, match="can be written by other users"):
        samples = epoch(urls, cache)
    assert_exact(samples, shard_set)
    assert cache.bypassed == len(urls) and cache.hits == 0


def test_a_cache_directory_of_another_user_is_not_used(
    http_server: HttpServer, shard_set: ShardSet, tmp_path: Path
) -> None:
    if not ROOT:
        pytest.skip("giving a directory to another user needs root")
    directory = tmp_path / "theirs"
    directory.mkdir(mode=0o755)
    urls = http_urls(http_server, shard_set)
    cache = ShardCache(directory, max_bytes=10 << 20)
    plant(cache, urls[0], evil_shard(tmp_path))
    os.chown(directory, 65534, 65534)
    with pytest.warns(ShardCacheWarning, match="not a directory of this user"):
        samples = epoch(urls, cache)
    assert_exact(samples, shard_set)


def test_an_entry_of_another_user_is_not_served(
    http_server: HttpServer, shard_set: ShardSet, tmp_path: Path
) -> None:
    if not ROOT:
        pytest.skip("giving a file to another user needs root")
    urls = http_urls(http_server, shard_set)
    cache = ShardCache(tmp_path / "cache", max_bytes=10 << 20)
    assert_exact(epoch(urls, cache), shard_set)
    entry = cache.entry_path(urls[0])
    plant(cache, urls[0], evil_shard(tmp_path))
    os.chown(entry, 65534, 65534)
    assert_exact(epoch(urls, cache), shard_set)
    assert cache.rejected == 1


def test_new_cache_directories_and_entries_are_private(
    http_server: HttpServer, shard_set: ShardSet, tmp_path: Path
) -> None:
    cache = ShardCache(tmp_path / "new" / "cache", max_bytes=10 << 20)
    urls = http_urls(http_server, shard_set)[:1]
    epoch(urls, cache)
    assert (tmp_path / "new" / "cache").stat().st_mode & 0o777 == 0o700
    entry = Path(cache.entry_path(urls[0]))
    for path in (entry, Path(record_path(str(entry)))):
        assert path.stat().st_mode & 0o777 == 0o600


@pytest.fixture
def second_s3(tmp_path: Path, loop_executor: None) -> Iterator[Weed]:  # noqa: F811
    server = Weed(tmp_path / "weed-b")
    server.data_dir.mkdir()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_same_key_on_two_endpoints_is_two_entries(
    s3_server: S3Server, second_s3: Weed, tmp_path: Path
) -> None:
    import s3fs

    options_b: dict[str, Any] = {
        **s3_server.storage_options,
        "client_kwargs": {"endpoint_url": second_s3.endpoint, "region_name": "us-east-1"},
    }
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options_b)
    key = f"{BUCKET}/same/key.bin"
    fs.mkdir(BUCKET)
    fs.pipe_file(key, b"B" * 5000)
    fs_a = s3fs.S3FileSystem(skip_instance_cache=True, **s3_server.storage_options)
    fs_a.pipe_file(key, b"A" * 4000)
    cache = ShardCache(tmp_path / "cache", max_bytes=10 << 20)
    try:
        for _ in range(2):
            with open_url(f"s3://{key}", s3_server.storage_options, cache=cache) as stream:
                assert stream.read() == b"A" * 4000
            with open_url(f"s3://{key}", options_b, cache=cache) as stream:
                assert stream.read() == b"B" * 5000
        assert (cache.misses, cache.hits) == (2, 2)
    finally:
        fs_a.rm(key)
        for filesystem in (fs, fs_a):
            if getattr(filesystem, "_s3creator", None) is not None:
                type(filesystem).close_session(filesystem.loop, filesystem._s3creator)
