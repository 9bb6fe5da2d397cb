"""`read_members` against the standard library's tarfile, resume offsets, and bad archives."""

from __future__ import annotations

import io
import itertools
import tarfile
from typing import IO

import pytest

from conveyor.formats import SampleError, open_archive, read_members

FILES = [
    ("000001.jpg", b"\xff\xd8jpeg" * 100),
    ("000001.cls", b"3"),
    ("empty.txt", b""),
    ("dir/" + "n" * 120 + ".txt", b"long name"),  # > 100 characters
    ("a/" * 40 + "deep.bin", bytes(range(256)) * 3),  # long path with directories
    ("exact.bin", b"x" * 512),
    ("p/" * 60 + "prefixed.bin", b"ustar prefix field"),  # 132 characters, split by ustar
]


def fits_ustar(name: str) -> bool:
    directory, _, base = name.rpartition("/")
    return len(name) <= 100 or (len(base) <= 100 and len(directory) <= 155)


def make_tar(fmt: int, compression: str = "") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}", format=fmt) as archive:
        directory = tarfile.TarInfo("somedir")
        directory.type = tarfile.DIRTYPE
        archive.addfile(directory)
        for name, data in FILES:
            if fmt == tarfile.USTAR_FORMAT and not fits_ustar(name):
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("link")
        link.type = tarfile.SYMTYPE
        link.linkname = "000001.jpg"
        archive.addfile(link)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=str
)
def test_members_match_tarfile(fmt: int) -> None:
    ustar = fmt == tarfile.USTAR_FORMAT
    files = [(name, data) for name, data in FILES if fits_ustar(name) or not ustar]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as archive:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    raw = buffer.getvalue()
    with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
        expected = [(info.name, info.offset) for info in archive.getmembers()]
    members = list(read_members(io.BytesIO(raw), "x.tar"))
    assert [(m.name, m.offset) for m in members] == expected
    assert [m.data for m in members] == [data for _, data in files]
    for member, following in itertools.pairwise(members):
        assert member.end == following.offset


def test_special_members_are_skipped() -> None:
    members = list(read_members(io.BytesIO(make_tar(tarfile.PAX_FORMAT)), "x.tar"))
    assert [m.name for m in members] == [name for name, _ in FILES]


def test_gzip_archive() -> None:
    raw = make_tar(tarfile.PAX_FORMAT, "gz")
    stream = open_archive(io.BytesIO(raw), "s/x.tar.gz")
    assert [m.data for m in read_members(stream, "s/x.tar.gz")] == [d for _, d in FILES]


class Unseekable(io.RawIOBase):
    """A forward-only stream (a socket, a pipe)."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        chunk = self._data.read(min(len(buffer), 700))  # short reads on purpose
        buffer[: len(chunk)] = chunk
        return len(chunk)


@pytest.mark.parametrize("seekable", [True, False])
def test_resume_at_every_member(seekable: bool) -> None:
    raw = make_tar(tarfile.GNU_FORMAT)
    members = list(read_members(io.BytesIO(raw), "x.tar"))
    for index, member in enumerate(members):
        stream: IO[bytes] = io.BytesIO(raw) if seekable else io.BufferedReader(Unseekable(raw))
        rest = list(read_members(stream, "x.tar", start=member.end))
        assert [m.name for m in rest] == [m.name for m in members[index + 1 :]]
        stream = io.BytesIO(raw)
        again = list(read_members(stream, "x.tar", start=member.offset))
        assert again[0] == member


def test_corrupt_header_names_url_and_offset() -> None:
    raw = bytearray(make_tar(tarfile.USTAR_FORMAT))
    members = list(read_members(io.BytesIO(bytes(raw)), "x.tar"))
    target = members[2].offset
    raw[target + 10] ^= 0xFF
    reader = read_members(io.BytesIO(bytes(raw)), "s3://b/x.tar")
    assert next(reader).name == members[0].name
    assert next(reader).name == members[1].name
    with pytest.raises(SampleError, match="checksum") as caught:
        next(reader)
    assert caught.value.url == "s3://b/x.tar"
    assert caught.value.offset == target
    assert "s3://b/x.tar" in str(caught.value)


def test_truncated_member_and_header() -> None:
    raw = make_tar(tarfile.USTAR_FORMAT)
    first = next(read_members(io.BytesIO(raw), "x.tar"))
    with pytest.raises(SampleError, match="truncated tar member"):
        list(read_members(io.BytesIO(raw[: first.offset + 600]), "x.tar"))
    with pytest.raises(SampleError, match="truncated tar header"):
        list(read_members(io.BytesIO(raw[: first.end + 100]), "x.tar"))


def test_not_a_tar_file() -> None:
    with pytest.raises(SampleError, match="corrupt tar header"):
        list(read_members(io.BytesIO(b"<html>" + bytes(600)), "x.tar"))


def test_resume_past_the_end_raises() -> None:
    stream = io.BufferedReader(Unseekable(b"abc"))
    with pytest.raises(SampleError, match="resume offset"):
        list(read_members(stream, "x.tar", start=10_000))
