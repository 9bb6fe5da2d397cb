"""Parser differential: shards written by GNU tar, Python's tarfile, WebDataset's writer and
conveyor's own, read by conveyor, tarfile and GNU tar, must give the same regular members
(names and bytes), in the same order. A real GNU tar binary writes and lists the archives."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

from conveyor.formats import ShardWriter, open_archive, read_members

from tar_crafting import Members, gnu_tar_view, tarfile_view

pytestmark = pytest.mark.timeout(120)

GNU_TAR = shutil.which("tar")


def _is_gnu_tar(tar: str | None) -> bool:
    if tar is None:
        return False
    version = subprocess.run([tar, "--version"], capture_output=True, text=True, check=False)
    return "GNU" in version.stdout


needs_gnu_tar = pytest.mark.skipif(not _is_gnu_tar(GNU_TAR), reason="GNU tar is not installed")


def source_tree(root: Path, long_names: bool) -> Path:
    """Files a shard writer meets: binary, empty, unicode, spaces, deep paths (over 100
    bytes: a ustar prefix), a name component over 100 bytes (GNU long name / pax path),
    a directory, a symlink and a hard link."""
    tree = root / "tree"
    rng = np.random.default_rng(0)
    files = {
        "000001.jpg": rng.bytes(70_000),
        "000001.cls": b"3",
        "000002.txt": b"",
        "ünï/çødé 000004.txt": "unicode ✓".encode(),
        "with space/000005.json": b'{"a": 1}',
        "deep/" + "d" * 90 + "/000003.txt": b"deep",  # 110 bytes: a ustar prefix
    }
    if long_names:
        files["long-" + "n" * 200 + ".txt"] = b"long name"
    for name, data in files.items():
        path = tree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (tree / "empty-dir").mkdir()
    os.symlink("000001.cls", tree / "000006.cls")
    os.link(tree / "000001.jpg", tree / "000007.jpg")
    return tree


def conveyor_members(data: bytes, name: str) -> Members:
    stream = open_archive(io.BytesIO(data), name)  # type: ignore[arg-type]
    return [(m.name, m.data) for m in read_members(stream, name)]


def assert_all_read_alike(data: bytes, name: str = "shard.tar") -> Members:
    plain = gzip.decompress(data) if name.endswith(".gz") else data
    ours = conveyor_members(data, name)
    theirs, error = tarfile_view(plain)
    assert not error and ours == theirs
    gnu = gnu_tar_view(plain)
    if gnu is not None:
        assert not gnu[1] and ours == gnu[0]
    return ours


@needs_gnu_tar
@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.parametrize("tar_format", ["gnu", "oldgnu", "posix", "ustar"])
def test_gnu_tar_archives(tmp_path: Path, tar_format: str, gzipped: bool) -> None:
    tree = source_tree(tmp_path, long_names=tar_format != "ustar")
    name = "shard.tar.gz" if gzipped else "shard.tar"
    out = tmp_path / name
    flags = "-czf" if gzipped else "-cf"
    assert GNU_TAR is not None
    subprocess.run(
        [GNU_TAR, f"--format={tar_format}", "--sort=name", flags, str(out), "-C", str(tree), "."],
        check=True, timeout=60, env={"LC_ALL": "C.UTF-8"},
    )  # fmt: skip
    members = assert_all_read_alike(out.read_bytes(), name)
    names = [member_name for member_name, _ in members]
    assert "./000001.jpg" in names and "./000007.jpg" not in names  # 7: a hard link
    assert any("ünï" in member_name for member_name in names)


@pytest.mark.parametrize(
    "tar_format", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]
)
def test_tarfile_archives(tmp_path: Path, tar_format: int) -> None:
    tree = source_tree(tmp_path, long_names=tar_format != tarfile.USTAR_FORMAT)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format) as archive:
        for path in sorted(tree.rglob("*")):
            archive.add(path, arcname=str(path.relative_to(tree)), recursive=False)
    members = assert_all_read_alike(buffer.getvalue())
    assert len(members) >= 6


def _samples() -> list[dict[str, object]]:
    rng = np.random.default_rng(1)
    return [
        {"__key__": f"{i:06d}", "jpg": rng.bytes(5_000 + i), "cls": i, "txt": f"sample ✓ {i}"}
        for i in range(12)
    ] + [{"__key__": "deep/" + "k" * 150, "txt": "a key over 100 bytes"}]


def test_conveyor_writer_archives(tmp_path: Path) -> None:
    with ShardWriter(str(tmp_path / "shard-%02d.tar"), max_count=100) as writer:
        for sample in _samples():
            writer.write(sample)
    (shard,) = writer.shards
    assert len(assert_all_read_alike(Path(shard).read_bytes())) == 37


def test_webdataset_writer_archives() -> None:
    webdataset = pytest.importorskip("webdataset")
    buffer = io.BytesIO()
    with webdataset.TarWriter(buffer) as writer:
        for sample in _samples():
            writer.write(sample)
    assert len(assert_all_read_alike(buffer.getvalue())) == 37
