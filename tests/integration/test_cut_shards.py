"""A tar shard cut exactly at a member boundary (an interrupted upload or copy: no end-of-
archive blocks) is a damaged shard, never a complete shorter one: under ``"skip"`` its lost
samples are estimated and named, under ``"raise"`` it raises, read from a local disk, over
HTTP or from S3, with and without workers. And no writer in use leaves its end blocks
out, so a whole shard is never taken for a cut one."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from remote_servers import BUCKET, HttpServer, S3Server, ShardSet

from conveyor import DataLoader
from conveyor.datapipes.iter import TarShards
from conveyor.formats import BadSampleWarning, SampleError, ShardWriter, read_members
from conveyor.storage import get_filesystem

pytestmark = pytest.mark.timeout(120)

PER_SHARD = 16


def _write(root: Path) -> tuple[list[Path], list[str]]:
    """Two shards of 16 samples; the second cut before its 16th sample's header."""
    keys = [f"{i:04d}" for i in range(2 * PER_SHARD)]
    with ShardWriter(str(root / "whole-%03d.tar"), max_count=PER_SHARD) as writer:
        for key in keys:
            writer.write({"__key__": key, "txt": f"sample {key}".encode()})
    first, second = (Path(p) for p in writer.shards)
    with tarfile.open(second) as archive:
        last = next(m for m in archive.getmembers() if m.name.startswith(keys[-1]))
    data = second.read_bytes()
    (root / "cut").mkdir(exist_ok=True)
    shutil.copy(first, root / "cut" / "a.tar")
    (root / "cut" / "b.tar").write_bytes(data[: last.offset])  # ends at a member boundary
    return [root / "cut" / "a.tar", root / "cut" / "b.tar"], keys


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[str]]:
    return _write(tmp_path_factory.mktemp("cut-shards"))


def _placed(
    where: str, paths: list[Path], http: HttpServer, root: Path, s3: S3Server
) -> tuple[list[str], dict[str, Any]]:
    """The shards' URLs on a local disk, the tests' HTTP server (which serves ``root``) or
    SeaweedFS, and the options to read them."""
    if where == "local":
        return [str(p) for p in paths], {}
    if where == "http":
        (root / "cut").mkdir(exist_ok=True)
        for path in paths:
            shutil.copy(path, root / "cut" / path.name)
        return [f"{http.url}/cut/{p.name}" for p in paths], {}
    fs = get_filesystem("s3://", s3.storage_options).fs  # type: ignore[attr-defined]
    for path in paths:
        fs.pipe(f"{BUCKET}/cut/{path.name}", path.read_bytes())
    return [f"s3://{BUCKET}/cut/{p.name}" for p in paths], {"storage_options": s3.storage_options}


@pytest.fixture(params=["local", "http", "s3"])
def urls(
    request: pytest.FixtureRequest,
    shards: tuple[list[Path], list[str]],
    http_server: HttpServer,
    shard_set: ShardSet,
    s3_server: S3Server,
) -> tuple[list[str], dict[str, Any]]:
    return _placed(request.param, shards[0], http_server, shard_set.root, s3_server)


WORKERS = [(0, "process"), (2, "process"), (2, "thread")]


@pytest.mark.parametrize(("num_workers", "worker_type"), WORKERS)
def test_a_shard_cut_at_a_member_boundary_is_counted_under_skip(
    urls: tuple[list[str], dict[str, Any]],
    shards: tuple[list[Path], list[str]],
    num_workers: int,
    worker_type: str,
) -> None:
    shard_urls, options = urls
    _, keys = shards
    pipe = TarShards(shard_urls, decode=None, on_error="skip", **options)
    loader = DataLoader(pipe, batch_size=None, num_workers=num_workers, worker_type=worker_type)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        delivered = sorted(sample["__key__"] for sample in loader)
    # the last sample before the cut may have had more members: dropped and counted too
    assert delivered == keys[: PER_SHARD + 14]
    assert loader.stats().skipped >= 1
    messages = [str(w.message) for w in caught if issubclass(w.category, BadSampleWarning)]
    assert len(messages) == 1 and "cut short" in messages[0]
    assert shard_urls[1] in messages[0] and keys[PER_SHARD + 14] in messages[0]
    assert "~" in messages[0]  # estimated: the cut took what it took


@pytest.mark.parametrize(("num_workers", "worker_type"), WORKERS)
def test_a_shard_cut_at_a_member_boundary_raises_under_raise(
    urls: tuple[list[str], dict[str, Any]], num_workers: int, worker_type: str
) -> None:
    shard_urls, options = urls
    pipe = TarShards(shard_urls, decode=None, **options)
    loader = DataLoader(pipe, batch_size=None, num_workers=num_workers, worker_type=worker_type)
    with pytest.raises(SampleError, match="cut short") as caught:
        list(loader)
    assert "b.tar" in str(caught.value)


# ----------------------------------------------------------------------------- writers


def _files() -> list[tuple[str, bytes]]:
    return [(f"{i:04d}.{ext}", bytes([i]) * (100 + 37 * i)) for i in range(5) for ext in "ab"]


def _tarfile(tar_format: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format) as archive:
        for name, data in _files():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _gnu_tar(tmp_path: Path, tar_format: str) -> bytes | None:
    tar = shutil.which("tar")
    if tar is None:
        return None
    version = subprocess.run([tar, "--version"], capture_output=True, text=True, check=False)
    if "GNU" not in version.stdout:
        return None
    for name, data in _files():
        (tmp_path / name).write_bytes(data)
    out = tmp_path / "gnu.tar"
    names = [name for name, _ in _files()]
    subprocess.run(
        [tar, f"--format={tar_format}", "-cf", str(out), *names], cwd=tmp_path, check=True
    )
    return out.read_bytes()


def _conveyor(tmp_path: Path) -> bytes:
    with ShardWriter(str(tmp_path / "conveyor-%d.tar"), max_count=100) as writer:
        for i in range(5):
            writer.write({"__key__": f"{i:04d}", "a": bytes([i]) * 100, "b": b"x"})
    return Path(writer.shards[0]).read_bytes()


def _webdataset() -> bytes | None:
    try:
        import webdataset
    except ImportError:
        return None
    buffer = io.BytesIO()
    with webdataset.TarWriter(buffer) as writer:
        for i in range(5):
            writer.write({"__key__": f"{i:04d}", "a": bytes([i]) * 100, "b": b"x"})
    return buffer.getvalue()


def _written(tmp_path: Path) -> dict[str, bytes | None]:
    written: dict[str, bytes | None] = {
        f"tarfile-{name}": _tarfile(fmt)
        for name, fmt in (("ustar", tarfile.USTAR_FORMAT), ("gnu", tarfile.GNU_FORMAT),
                          ("pax", tarfile.PAX_FORMAT))
    }  # fmt: skip
    for tar_format in ("gnu", "posix", "ustar"):
        written[f"gnu-tar-{tar_format}"] = _gnu_tar(tmp_path, tar_format)
    written["conveyor"] = _conveyor(tmp_path)
    written["webdataset"] = _webdataset()
    return written


def test_every_writer_ends_its_shards_with_the_end_of_archive_blocks(tmp_path: Path) -> None:
    """No false positives: tarfile (WebDataset's TarWriter uses it), GNU tar and conveyor's
    ShardWriter all close an archive with two zero blocks; read whole, nothing is cut.
    Cut before those blocks, every one of them is seen as cut."""
    checked = []
    for writer, data in _written(tmp_path).items():
        if data is None:
            continue  # the writer is not installed here
        assert data.endswith(bytes(1024)), writer
        assert len(list(read_members(io.BytesIO(data), writer))) == 10, writer
        end = len(data.rstrip(b"\0"))  # the last member's data ends in a non-zero byte
        end += -end % 512
        with pytest.raises(SampleError, match="cut short"):
            list(read_members(io.BytesIO(data[:end]), writer))
        checked.append(writer)
    assert {"tarfile-ustar", "tarfile-gnu", "tarfile-pax", "conveyor"} <= set(checked)
