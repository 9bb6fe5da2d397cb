"""Bad data is raised with its shard and key, or skipped, counted and reported."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import (
    BadSampleWarning,
    ErrorPolicy,
    SampleError,
    ShardWriter,
    TooManyBadSamples,
    read_members,
)
from conveyor.formats.skips import drain_skips


def corrupt_member(shard: str, index: int) -> int:
    """Flip a byte in the header of member ``index``; returns that header's offset."""
    with open(shard, "rb") as archive:
        offset = list(read_members(archive, shard))[index].offset
    with open(shard, "r+b") as archive:
        archive.seek(offset + 20)
        archive.write(b"\xff")
    return offset


def test_corrupt_member_raises_with_shard_and_offset(shards: list[str]) -> None:
    offset = corrupt_member(shards[1], 4)  # sample 6's second member (jpg, cls, txt each)
    with pytest.raises(SampleError) as caught:
        list(TarShards(shards))
    assert caught.value.url == shards[1] and caught.value.offset == offset
    assert shards[1] in str(caught.value)


def test_corrupt_member_skipped_and_counted(shards: list[str]) -> None:
    corrupt_member(shards[1], 4)
    drain_skips()
    pipe = TarShards(shards, on_error="skip")
    with pytest.warns(BadSampleWarning, match=r"skipped 4 bad sample\(s\) in 1 skip"):
        keys = [s["cls"] for s in pipe]
    # shard 1 (samples 5..9) stops at the header of 6's second member: 6, 7, 8, 9 are lost,
    # found by reading the rest of the shard for its headers (an exact count, with keys)
    assert keys == [0, 1, 2, 3, 4, 5, *range(10, 20)]
    assert (pipe.errors.skipped, pipe.errors.estimated, pipe.errors.records) == (4, 0, 1)
    record = pipe.errors.examples[0]
    assert record.url == shards[1] and not record.estimated
    assert record.keys == ("000006", "000007", "000008", "000009")
    assert "corrupt tar header" in pipe.errors.report()
    assert drain_skips() == [record]


def test_undecodable_image_names_key(tmp_path: Path, make_shards: Callable[..., list[str]]) -> None:
    shards = make_shards(samples=4, per_shard=4)
    with ShardWriter(str(tmp_path / "bad-%d.tar")) as writer:
        writer.write({"__key__": "broken", "jpg": b"not a jpeg", "cls": 1})
    urls = [*shards, *writer.shards]
    with pytest.raises(SampleError, match="cannot decode 'jpg'") as caught:
        list(TarShards(urls))
    assert (caught.value.url, caught.value.key) == (writer.shards[0], "broken")
    policy = ErrorPolicy("skip")
    with pytest.warns(BadSampleWarning):
        assert len(list(TarShards(urls, on_error=policy))) == 4
    assert policy.skipped == 1 and policy.examples[0].key == "broken"


def test_missing_shard(shards: list[str]) -> None:
    missing = os.path.join(os.path.dirname(shards[0]), "missing.tar")
    with pytest.raises(SampleError, match="cannot open") as caught:
        list(TarShards([shards[0], missing]))
    assert caught.value.url == missing
    pipe = TarShards([missing, shards[0]], on_error="skip")
    with pytest.warns(BadSampleWarning, match="cannot open"):
        assert len(list(pipe)) == 5
    assert pipe.errors.skipped == 1


def test_skip_budget(shards: list[str]) -> None:
    missing = os.path.join(os.path.dirname(shards[0]), "missing-%d.tar")
    urls = [missing % 1, missing % 2, *shards]
    with pytest.raises(TooManyBadSamples, match="max_skips=1"):
        list(TarShards(urls, on_error=ErrorPolicy("skip", max_skips=1)))
    rate = ErrorPolicy("skip", max_rate=0.05, min_seen=2)
    with pytest.raises(TooManyBadSamples, match="max_rate"):
        list(TarShards([*shards, missing % 3, missing % 4], on_error=rate))


def test_policy_validation_and_pickling() -> None:
    with pytest.raises(ValueError, match="on_error"):
        ErrorPolicy("ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_rate"):
        ErrorPolicy("skip", max_rate=2)
    error = pickle.loads(pickle.dumps(SampleError("bad", "s3://b/x.tar", "k1", 1024)))
    assert (error.reason, error.url, error.key, error.offset) == ("bad", "s3://b/x.tar", "k1", 1024)
    assert str(error) == "bad (shard 's3://b/x.tar', sample 'k1', offset 1024)"
