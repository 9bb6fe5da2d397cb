"""Hostile and odd tar headers: conveyor sees exactly what tarfile and GNU tar see, or refuses
the archive, always in bounded time; and a member over ``max_member_bytes`` is never read.

The differential rule: conveyor never yields a member (name and bytes) that Python's tarfile
(WebDataset's reader) does not; on an archive the tools read alike it yields exactly their
members; where they disagree or a rule is bent, it raises `SampleError` after the members
before the bad header.
"""

from __future__ import annotations

import gzip
import io
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import SampleError, read_members
from conveyor.formats.skips import drain_skips
from conveyor.formats.tar import DEFAULT_MAX_MEMBER_BYTES, TarCorruption

from tar_crafting import (
    BLOCK,
    GNU_MAGIC,
    Members,
    archive,
    gnu_tar_view,
    header,
    member,
    padded,
    pax_member,
    pax_records,
    tarfile_view,
)

pytestmark = pytest.mark.timeout(30)
BOUND_S = 2.0  # every archive here is a few KiB: anything slower is a spin


def conveyor_view(data: bytes, **options: int) -> tuple[Members, SampleError | None]:
    members: Members = []
    started = time.monotonic()
    try:
        for found in read_members(io.BytesIO(data), "crafted.tar", **options):
            members.append((found.name, found.data))
    except SampleError as error:
        return members, error
    finally:
        assert time.monotonic() - started < BOUND_S
    return members, None


def hidden_behind(size: int) -> tuple[bytes, bytes]:
    """A first member's data that hides a whole member in its tail, and that member."""
    hidden = member("s0009.txt", b"only a reader that ignores pax size sees me")
    return b"s0008" + bytes(size - 5) + hidden, hidden


def _pax_size_override() -> bytes:
    shown, _ = hidden_behind(BLOCK)
    fake_header = header("s0008.txt", 5)  # says 5 bytes; the pax record says all of them
    records = pax_records(("size", str(len(shown))))
    return archive(
        member("s0007.txt", b"seven"), pax_member(records), fake_header, padded(shown),
        member("s0010.txt", b"ten"),
    )  # fmt: skip


def _symlink_with_data() -> bytes:
    _, hidden = hidden_behind(BLOCK)
    link = header("s0008.txt", len(hidden), b"2", linkname=b"target")
    return archive(member("s0007.txt", b"seven"), link, hidden, member("s0010.txt", b"ten"))


def _sparse_records() -> bytes:
    records = pax_records(("GNU.sparse.map", "0,5"), ("GNU.sparse.realsize", "5"))
    return archive(pax_member(records), member("a.txt", b"hello"))


# Archives every reader reads alike: conveyor must see exactly tarfile's members.
SAME: dict[str, Callable[[], bytes]] = {
    "pax size override (the hidden s0009)": _pax_size_override,
    "pax path, unicode": lambda: archive(
        pax_member(pax_records(("path", "dir/ünïcødé-" + "x" * 150 + ".txt"))),
        member("short.txt", b"data"),
    ),
    "GNU long name": lambda: archive(
        member("././@LongLink", ("l" * 200 + ".txt").encode() + b"\0", b"L", magic=GNU_MAGIC),
        member("truncated", b"long", magic=GNU_MAGIC),
    ),
    "GNU long link then long name": lambda: archive(
        member("././@LongLink", b"t" * 150 + b"\0", b"K", magic=GNU_MAGIC),
        member("././@LongLink", b"n" * 150 + b".txt\0", b"L", magic=GNU_MAGIC),
        member("truncated", b"", b"1", magic=GNU_MAGIC),
        member("b.txt", b"after the link"),
    ),
    "ustar prefix": lambda: archive(member("file.txt", b"p", prefix=b"a" * 120 + b"/b")),
    "base-256 size": lambda: archive(
        header("big.txt", b"\x80" + (5).to_bytes(11, "big")) + padded(b"12345")
    ),
    "signed checksum": lambda: archive(
        member("caf\xe9.txt".encode("latin-1"), b"x", signed_checksum=True)
    ),
    "space-padded numbers": lambda: archive(header("s.txt", b"         12 ") + padded(b"x" * 10)),
    "old-style regular (NUL type)": lambda: archive(member("a.txt", b"nul", b"\0")),
    "old-style directory (NUL type, slash)": lambda: archive(
        header("d/", 0, b"\0"), member("d/a.txt", b"in d")
    ),
    "contiguous file": lambda: archive(member("c.txt", b"contiguous", b"7")),
    "unknown type with data": lambda: archive(
        member("label", b"v" * 700, b"V"), member("after.txt", b"after")
    ),
    "pax global comment (git archive)": lambda: archive(
        pax_member(pax_records(("comment", "0123abcd")), b"g"), member("a.txt", b"a")
    ),
    "pax mtime and uid only": lambda: archive(
        pax_member(pax_records(("mtime", "1.5"), ("uid", "7"))), member("a.txt", b"a")
    ),
    "directory, symlink, hard link": lambda: archive(
        header("d", 0, b"5"),
        header("l", 0, b"2", linkname=b"d"),
        member("d/f.txt", b"f"),
        header("h", 0, b"1", linkname=b"d/f.txt"),
    ),
}

# Archives with a malformed header, or a form the readers disagree on: refused.
REFUSED: dict[str, Callable[[], bytes]] = {
    "zero-length pax record": lambda: archive(pax_member(b"0 size=100\n"), member("a.txt", b"a")),
    "pax record longer than the header": lambda: archive(
        pax_member(b"99 path=a.txt\n"), member("a.txt", b"a")
    ),
    "pax record without newline": lambda: archive(
        pax_member(b"13 path=a.txtX"), member("a.txt", b"a")
    ),
    "pax record without length": lambda: archive(
        pax_member(b"path=a.txt\n"), member("a.txt", b"a")
    ),
    "pax size not a number": lambda: archive(
        pax_member(pax_records(("size", "+5"))), member("a.txt", b"hello")
    ),
    "negative base-256 size": lambda: archive(
        member("a.txt", b"a"), header("n.txt", b"\xff" * 12), member("b.txt", b"b")
    ),
    "size with a radix prefix": lambda: archive(header("a.txt", b"0o5\0") + padded(b"hello")),
    "size with a sign": lambda: archive(header("a.txt", b"+5\0") + padded(b"hello")),
    "symlink with data hiding a member": _symlink_with_data,
    "directory with data": lambda: archive(
        header("d", 700, b"5"), padded(b"d" * 700), member("a.txt", b"a")
    ),
    "GNU header with a name prefix": lambda: archive(
        member("a.txt", b"a", magic=GNU_MAGIC, prefix=b"14712345670")
    ),
    "two pax headers for one member": lambda: archive(
        pax_member(pax_records(("path", "x.txt"))),
        pax_member(pax_records(("path", "y.txt"))),
        member("a.txt", b"a"),
    ),
    "GNU long name and pax path": lambda: archive(
        member("././@LongLink", b"long.txt\0", b"L"),
        pax_member(pax_records(("path", "other.txt"))),
        member("a.txt", b"a"),
    ),
    "pax header at the end": lambda: archive(
        member("a.txt", b"a"), pax_member(pax_records(("path", "x.txt")))
    ),
    "pax global path": lambda: archive(
        pax_member(pax_records(("path", "everything.txt")), b"g"), member("a.txt", b"a")
    ),
    "GNU sparse member": lambda: archive(member("s.txt", b"sparse", b"S", magic=GNU_MAGIC)),
    "pax sparse records": _sparse_records,
    "extended header of 1 GiB": lambda: archive(header("PaxHeaders/x", 1 << 30, b"x")),
    "member without a name": lambda: archive(member("", b"nameless")),
}


def assert_a_prefix_of(ours: Members, theirs: Members) -> None:
    assert ours == theirs[: len(ours)], "conveyor saw a member tarfile does not"


@pytest.mark.parametrize("name", list(SAME))
def test_archives_read_alike_are_read_exactly_like_tarfile_and_gnu_tar(name: str) -> None:
    data = SAME[name]()
    ours, error = conveyor_view(data)
    theirs, their_error = tarfile_view(data)
    assert error is None and not their_error
    assert ours == theirs and ours
    gnu = gnu_tar_view(data)
    if gnu is not None and not gnu[1]:
        assert ours == gnu[0]


@pytest.mark.parametrize("name", list(REFUSED))
def test_malformed_or_ambiguous_headers_are_refused_in_bounded_time(name: str) -> None:
    data = REFUSED[name]()
    ours, error = conveyor_view(data)
    assert isinstance(error, SampleError), f"read {ours} without an error"
    assert_a_prefix_of(ours, tarfile_view(data)[0])


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_zero_length_pax_record_in_a_shard_is_an_error_or_a_counted_skip(
    tmp_path: Path, on_error: str
) -> None:
    """The 2.5 KiB shard that made the reader spin forever, through the whole pipeline."""
    shard = tmp_path / "spin.tar"
    shard.write_bytes(
        archive(member("s0.txt", b"zero"), pax_member(b"0 size=100\n"), member("s1.txt", b"1"))
    )
    drain_skips()
    started = time.monotonic()
    pipe = TarShards([str(shard)], decode=None, on_error=on_error)  # type: ignore[arg-type]
    if on_error == "raise":
        with pytest.raises(TarCorruption, match="pax header"):
            list(pipe)
    else:
        with pytest.warns(UserWarning, match="corrupt pax header"):
            samples = list(pipe)
        assert samples == []  # s0 was in progress (maybe incomplete), s1 after the header
        assert pipe.errors.skipped == 2 and pipe.errors.examples[0].keys == ("s0", "s1")
    assert time.monotonic() - started < BOUND_S
    drain_skips()


def _bomb(tmp_path: Path, member_bytes: int) -> Path:
    """A gzip shard: a small sample, one of ``member_bytes`` zeros, then two small ones."""
    shard = tmp_path / "bomb.tar.gz"
    body = archive(
        member("a.txt", b"a"), member("b.txt", b"b"),
        header("b.bin", member_bytes), bytes(member_bytes),
        member("c.txt", b"c"), member("d.txt", b"d"),
    )  # fmt: skip
    shard.write_bytes(gzip.compress(body, compresslevel=9))
    return shard


def test_a_member_over_the_cap_is_never_read_into_memory(tmp_path: Path) -> None:
    shard = _bomb(tmp_path, 64 << 20)
    assert shard.stat().st_size < 256 << 10  # 64 MiB of zeros in a few hundred KiB
    tracemalloc.start()
    try:
        with open(shard, "rb") as raw, gzip.GzipFile(fileobj=raw) as stream:
            found = list(read_members(stream, str(shard), max_member_bytes=4 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"peak {peak} bytes"
    assert [(m.name, bool(m.refused)) for m in found] == [
        ("a.txt", False), ("b.txt", False), ("b.bin", True), ("c.txt", False), ("d.txt", False)
    ]  # fmt: skip
    assert "max_member_bytes=4194304" in found[2].refused and found[2].data == b""
    assert DEFAULT_MAX_MEMBER_BYTES == 1 << 30


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_member_over_the_cap_raises_or_drops_its_whole_sample(
    tmp_path: Path, on_error: str
) -> None:
    shard = _bomb(tmp_path, 8 << 20)
    drain_skips()
    pipe = TarShards(
        [str(shard)],
        decode=None,
        on_error=on_error,
        max_member_bytes=1 << 20,  # type: ignore[arg-type]
    )
    if on_error == "raise":
        delivered = []
        with pytest.raises(SampleError, match="over max_member_bytes") as caught:
            delivered.extend(pipe)
        assert [s["__key__"] for s in delivered] == ["a"]  # complete before the error
        assert caught.value.key == "b"
    else:
        with pytest.warns(UserWarning, match="over max_member_bytes"):
            keys = [s["__key__"] for s in pipe]
        assert keys == ["a", "c", "d"]  # b lost its .bin: the whole sample is dropped
        assert pipe.errors.skipped == 1 and pipe.errors.examples[0].keys == ("b",)
    drain_skips()
