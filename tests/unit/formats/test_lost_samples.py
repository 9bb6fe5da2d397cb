"""Bad shards cost samples, and the count says how many: empty, cut and corrupt shards.

Each test reads real shards written by `ShardWriter` (samples of ``{jpg, cls, txt}``, so
three tar members per sample) and damages one the way disks and uploads do.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import BadSampleWarning, SampleError, ShardWriter, read_members
from conveyor.formats.skips import SkipRecord, drain_skips, skip_sink


@pytest.fixture(autouse=True)
def _empty_sink() -> Iterator[None]:
    drain_skips()
    yield
    drain_skips()


def keys(numbers: range | list[int]) -> list[str]:
    return [f"{i:06d}" for i in numbers]


def read_until_error(pipe: Any) -> tuple[list[str], BaseException | None]:
    got: list[str] = []
    try:
        for sample in pipe:
            got.append(sample["__key__"])
    except SampleError as error:
        return got, error
    return got, None


def member_span(shard: str, index: int) -> tuple[int, int]:
    with open(shard, "rb") as archive:
        member = list(read_members(archive, shard))[index]
    return member.offset, member.end


def cut(shard: str, size: int) -> None:
    with open(shard, "r+b") as archive:
        archive.truncate(size)


def only_record() -> SkipRecord:
    records = drain_skips()
    assert len(records) == 1, records
    return records[0]


def test_zero_byte_shard_is_an_error(make_shards: Callable[..., list[str]]) -> None:
    shards = make_shards(samples=15, per_shard=5)
    empty = os.path.join(os.path.dirname(shards[0]), "empty.tar")
    open(empty, "wb").close()
    urls = [shards[0], shards[1], empty, shards[2]]
    got, error = read_until_error(TarShards(urls, decode=None))
    assert got == keys(range(10))  # everything before it, then the error
    assert isinstance(error, SampleError) and error.url == empty
    assert "empty shard" in str(error) and empty in str(error)

    pipe = TarShards(urls, decode=None, on_error="skip")
    with pytest.warns(BadSampleWarning, match=r"skipped 5 bad sample\(s\), 5 of them estimated"):
        assert [s["__key__"] for s in pipe] == keys(range(15))
    record = only_record()
    assert (record.url, record.samples, record.estimated) == (empty, 5, True)  # 5 per shard


@pytest.mark.parametrize("where", ["member boundary", "inside a member"])
def test_cut_shard_is_an_error(make_shards: Callable[..., list[str]], where: str) -> None:
    shards = make_shards(samples=20, per_shard=5)
    # shard 1 holds samples 5..9; members 6, 7, 8 are sample 7's jpg, cls, txt
    if where == "member boundary":
        cut(shards[1], member_span(shards[1], 8)[1])
    else:
        cut(shards[1], member_span(shards[1], 6)[0] + 512 + 100)  # 100 bytes into the jpg
    got, error = read_until_error(TarShards(shards, decode=None))
    # 7 may be incomplete (a cut at a boundary cannot tell), so only 5 and 6 come first
    assert got == keys(range(7))
    assert isinstance(error, SampleError) and error.url == shards[1]
    assert ("cut short" if where == "member boundary" else "truncated tar member") in str(error)

    pipe = TarShards(shards, decode=None, on_error="skip")
    with pytest.warns(BadSampleWarning, match=r"skipped 3 bad sample\(s\)"):
        assert [s["__key__"] for s in pipe] == keys([*range(7), *range(10, 20)])
    record = only_record()
    # 7 is known lost; 8 and 9 are estimated from the shards read whole before (5 each)
    assert (record.url, record.keys, record.samples) == (shards[1], ("000007",), 3)
    assert record.estimated and pipe.errors.skipped == 3


def test_raise_mode_delivers_the_shuffle_buffer_before_the_error(
    make_shards: Callable[..., list[str]],
) -> None:
    shards = make_shards(samples=20, per_shard=5)
    with open(shards[1], "r+b") as archive:  # sample 6's cls header
        archive.seek(list(read_members(archive, shards[1]))[4].offset + 20)
        archive.write(b"\xff")
    pipe = TarShards(shards, decode=None, shuffle=True, shuffle_buffer=100)
    pipe.shards.set_shuffle(False)  # shards in order, samples through the shuffle buffer
    got, error = read_until_error(pipe)
    assert isinstance(error, SampleError) and error.url == shards[1]
    assert "corrupt tar header" in str(error)
    assert sorted(got) == keys(range(6))  # all complete samples, out of the buffer
    assert got != keys(range(6))  # and they were shuffled


def test_corrupt_header_over_a_nested_archive_is_an_estimate(tmp_path: Path) -> None:
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in ("x.txt", "y.txt"):
            info = tarfile.TarInfo(name)
            info.size = 3
            archive.addfile(info, io.BytesIO(b"abc"))
    shard = str(tmp_path / "nested.tar")
    with ShardWriter(str(tmp_path / "nested-%d.tar")) as writer:
        for key in ("a", "b", "c", "d"):
            payload = inner.getvalue() if key == "b" else b"plain"
            writer.write({"__key__": key, "tar": payload, "cls": 1})
    os.replace(writer.shards[0], shard)
    with open(shard, "r+b") as archive:  # b.tar's header: its data is a valid archive
        archive.seek(list(read_members(archive, shard))[2].offset + 20)
        archive.write(b"\xff")
    pipe = TarShards([shard], decode=None, on_error="skip")
    with pytest.warns(BadSampleWarning):
        assert [s["__key__"] for s in pipe] == []  # a: dropped as the sample in progress
    record = only_record()
    # the nested archive's members look like the shard's own: the count is marked estimated
    assert record.estimated and record.keys[0] == "a" and record.keys[-2:] == ("c", "d")


def test_skip_sink_drains_once_and_forked_children_start_empty() -> None:
    sink = skip_sink()
    sink.add(SkipRecord("s.tar", "corrupt", 2, ("k1", "k2")))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child inherits the record but must not report it again
        os.write(write, str(len(sink.drain())).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        assert pipe.read() == "0"
    assert os.waitpid(pid, 0)[1] == 0
    assert drain_skips() == [SkipRecord("s.tar", "corrupt", 2, ("k1", "k2"))]
    assert drain_skips() == []


def test_forwarding_leaves_warnings_to_the_engine(make_shards: Callable[..., list[str]]) -> None:
    shards = make_shards(samples=10, per_shard=5)
    missing = os.path.join(os.path.dirname(shards[0]), "missing.tar")
    skip_sink().forward_to_main(True)
    try:
        pipe = TarShards([shards[0], missing, shards[1]], decode=None, on_error="skip")
        assert len(list(pipe)) == 10  # no BadSampleWarning here (warnings are errors)
    finally:
        skip_sink().forward_to_main(False)
    record = only_record()
    assert (record.url, record.samples, record.estimated) == (missing, 5, True)
    assert "cannot open" in record.reason


def test_record_pickles_and_describes_itself() -> None:
    import pickle

    record = SkipRecord("s3://b/x.tar", "cut short", 7, ("k",), estimated=True)
    assert pickle.loads(pickle.dumps(record)) == record
    assert record.describe() == "~7 sample(s) of 's3://b/x.tar' (keys 'k'): cut short"
    error = SampleError("cut", "u", offset=3, loss=None)
    assert pickle.loads(pickle.dumps(error)).loss is None
