"""A shard replaced on the server while it is read: never two versions in one epoch.

The first answer pins the object (ETag, size, Last-Modified); every later range of that
shard must come from the same version, whether the server honours ``If-Match`` (412), ignores
it (the reader compares), or sends no ETag at all (the size still pins it). A change is an
error naming the shard (URL redacted), or, under ``on_error="skip"``, samples lost and
counted in the main process. Real servers on 127.0.0.1: the tests' HTTP server, which swaps
a file's bytes after a given number of requests, and SeaweedFS, whose object is overwritten
between two reads.
"""

from __future__ import annotations

import dataclasses
import io
import tarfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from remote_servers import BUCKET, FaultyServer, S3Server
from test_remote_faults import FAST

from conveyor import DataLoader
from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import BadSampleWarning, SampleError
from conveyor.formats.skips import drain_skips
from conveyor.storage import open_url
from conveyor.storage.retry import ObjectChangedError

pytestmark = pytest.mark.timeout(120)

SAMPLES = 40
BLOCK = 4096  # a shard of ~60 KiB is read in ~15 ranged requests
PASSWORD = "hunter2-never-shown"


def shard_bytes(version: str, longer: bool = False, repeat: int = 50) -> bytes:
    """40 samples whose ``txt`` says which version they come from (``repeat`` x 9 bytes)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for i in range(SAMPLES):
            text = (f"{version}-{i:04d};" * (repeat + 10 * longer)).encode()
            info = tarfile.TarInfo(f"s{i:04d}.txt")
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text))
    return buffer.getvalue()


@pytest.fixture
def server(tmp_path: Path, fsspec_loop: None) -> Iterator[FaultyServer]:
    (tmp_path / "a.tar").write_bytes(shard_bytes("old"))
    (tmp_path / "b.tar").write_bytes(shard_bytes("old"))
    served = FaultyServer(tmp_path)
    try:
        yield served
    finally:
        served.close()


@pytest.fixture(autouse=True)
def _empty_sink() -> Iterator[None]:
    drain_skips()
    yield
    drain_skips()


def url_of(server: FaultyServer, name: str) -> str:
    return server.url.replace("://", f"://alice:{PASSWORD}@") + f"/{name}"


def versions(samples: list[dict[str, Any]]) -> set[str]:
    return {bytes(s["txt"]).decode().split("-", 1)[0] for s in samples}


CASES = [
    ("honour", False),  # the server answers 412 to If-Match
    ("ignore", False),  # new ETag, same size: only the ETag tells
    ("ignore", True),
    ("none", True),  # no ETag at all: the size tells
]


def epoch_until_error(urls: list[str], block_size: int, remote: Any) -> tuple[list[Any], str]:
    """The samples delivered, and the error that ended the epoch (which must come)."""
    delivered: list[dict[str, Any]] = []
    with pytest.raises(SampleError) as caught:
        for sample in TarShards(urls, decode=None, block_size=block_size, remote=remote):
            delivered.append(sample)
    assert isinstance(caught.value.__cause__, ObjectChangedError)
    assert versions(delivered) <= {"old"}  # nothing of the new version, ever
    return delivered, str(caught.value)


@pytest.mark.parametrize("read_ahead", [0, 4])
@pytest.mark.parametrize(("etags", "longer"), CASES)
def test_a_shard_replaced_mid_read_is_an_error_naming_it(
    server: FaultyServer, etags: str, longer: bool, read_ahead: int
) -> None:
    server.etags = etags
    server.replace("/a.tar", shard_bytes("new", longer), after=2)
    remote = dataclasses.replace(FAST, read_ahead=read_ahead)
    urls = [url_of(server, "a.tar"), url_of(server, "b.tar")]
    delivered, message = epoch_until_error(urls, BLOCK, remote)
    assert len(delivered) < SAMPLES
    assert "changed while it was read" in message
    assert "/a.tar" in message and PASSWORD not in message and "***@" in message


@pytest.mark.parametrize("read_ahead", [0, 4])
def test_the_next_shard_opened_early_is_pinned_too(
    server: FaultyServer, tmp_path: Path, read_ahead: int
) -> None:
    """Read-ahead starts the next shard while the current one is read (opened early): its
    first block and its later ones (1 MiB blocks here) must be one version as well."""
    (tmp_path / "b.tar").write_bytes(shard_bytes("old", repeat=8000))  # 2.8 MiB
    server.etags = "ignore"
    server.replace("/b.tar", shard_bytes("new", repeat=8000), after=1)
    remote = dataclasses.replace(FAST, read_ahead=read_ahead)
    urls = [url_of(server, "a.tar"), url_of(server, "b.tar")]
    delivered, message = epoch_until_error(urls, 1 << 20 if read_ahead else 256 << 10, remote)
    assert SAMPLES <= len(delivered) < 2 * SAMPLES and "/b.tar" in message


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("read_ahead", [0, 4])
def test_under_skip_a_replaced_shard_is_counted_not_mixed(
    server: FaultyServer, read_ahead: int, num_workers: int
) -> None:
    server.etags = "ignore"
    server.replace("/a.tar", shard_bytes("new"), after=2)
    remote = dataclasses.replace(FAST, read_ahead=read_ahead)
    urls = [url_of(server, "a.tar"), url_of(server, "b.tar")]
    pipe = TarShards(urls, decode=None, block_size=BLOCK, remote=remote, on_error="skip")
    loader = DataLoader(pipe, batch_size=None, num_workers=num_workers)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        delivered = list(loader)
    assert versions(delivered) == {"old"}
    lost = loader.stats().skipped
    assert lost >= 1 and len(delivered) + lost >= 2 * SAMPLES - 1  # estimates may round
    (warning,) = [str(w.message) for w in caught if issubclass(w.category, BadSampleWarning)]
    assert "changed while it was read" in warning and "a.tar" in warning
    assert PASSWORD not in warning


def test_an_unchanged_shard_read_twice_is_fine(server: FaultyServer) -> None:
    """The pin is per read: the next epoch (a new read) takes the shard as it is then."""
    server.etags = "honour"
    urls = [url_of(server, "a.tar")]
    remote = dataclasses.replace(FAST, read_ahead=0)
    first = list(TarShards(urls, decode=None, block_size=BLOCK, remote=remote))
    server.replace("/a.tar", shard_bytes("new"), after=0)
    second = list(TarShards(urls, decode=None, block_size=BLOCK, remote=remote))
    assert versions(first) == {"old"} and versions(second) == {"new"}
    assert len(first) == len(second) == SAMPLES


@pytest.mark.parametrize("read_ahead", [0, 4])
def test_an_s3_object_overwritten_mid_read_is_an_error(
    s3_server: S3Server, read_ahead: int
) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_server.storage_options)
    key = f"{BUCKET}/replaced/shard-{read_ahead}.tar"
    old, new = b"o" * (2 << 20), b"n" * (2 << 20)  # 2 MiB: 32 blocks of 64 KiB
    fs.pipe_file(key, old)
    remote = dataclasses.replace(FAST, read_ahead=read_ahead)
    try:
        with open_url(f"s3://{key}", s3_server.storage_options, 64 << 10, remote=remote) as stream:
            first = stream.read(1000)
            fs.pipe_file(key, new)  # a new version (SeaweedFS gives it a new ETag)
            with pytest.raises(ObjectChangedError, match=f"changed while it was read.*{key}"):
                rest = stream.read()
                assert b"n" not in first + rest  # only reached if nothing raised
        assert first == old[:1000]
    finally:
        fs.rm(key)
        if getattr(fs, "_s3creator", None) is not None:
            type(fs).close_session(fs.loop, fs._s3creator)
