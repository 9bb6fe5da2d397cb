"""ShardWriter / TarWriter: limits, encodings, deterministic archives readable by tarfile."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from conveyor.formats import DecoderRegistry, ShardWriter, TarWriter, iter_samples


def sample(i: int, size: int = 100) -> dict[str, object]:
    return {"__key__": f"{i:04d}", "bin": bytes([i % 256]) * size, "cls": i}


def test_max_count(tmp_path: Path) -> None:
    with ShardWriter(str(tmp_path / "out-%03d.tar"), max_count=4) as writer:
        for i in range(10):
            writer.write(sample(i))
    assert [Path(s).name for s in writer.shards] == ["out-000.tar", "out-001.tar", "out-002.tar"]
    counts = [len(list(iter_samples(s))) for s in writer.shards]
    assert counts == [4, 4, 2] and writer.total == 10


def test_max_bytes(tmp_path: Path) -> None:
    per_sample = (512 + 1024) + (512 + 512)  # headers; 1000 bytes and 1 byte, padded
    with ShardWriter(str(tmp_path / "s-%d.tar"), max_bytes=3 * per_sample) as writer:
        for i in range(7):
            writer.write(sample(i, size=1000))
        writer.write(sample(7, size=50_000))  # larger than the limit: a shard of its own
        writer.write(sample(8, size=10))
    counts = [len(list(iter_samples(s))) for s in writer.shards]
    assert counts == [3, 3, 1, 1, 1]


def test_encodings_round_trip(tmp_path: Path) -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    path = str(tmp_path / "x.tar")
    with TarWriter(path) as writer:
        writer.write(
            {
                "__key__": "dir/k1",
                "txt": "text",
                "cls": 3,
                "json": {"a": 1},
                "npy": array,
                "pt": torch.arange(3),
                "bin": bytearray(b"\x01\x02"),
            }
        )
    (decoded,) = iter_samples(path, decoders=DecoderRegistry())
    assert decoded["__key__"] == "dir/k1" and decoded["txt"] == "text" and decoded["cls"] == 3
    assert decoded["json"] == {"a": 1} and np.array_equal(decoded["npy"], array)
    assert torch.equal(decoded["pt"], torch.arange(3)) and decoded["bin"] == b"\x01\x02"
    with tarfile.open(path) as archive:
        assert archive.getnames()[0] == "dir/k1.txt"


def test_deterministic_bytes(tmp_path: Path) -> None:
    for name in ("a.tar", "b.tar"):
        with TarWriter(str(tmp_path / name)) as writer:
            writer.write(sample(1))
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="%d"):
        ShardWriter(str(tmp_path / "no-field.tar"))
    with TarWriter(str(tmp_path / "x.tar")) as writer:
        with pytest.raises(ValueError, match="__key__"):
            writer.write({"bin": b"x"})
        with pytest.raises(ValueError, match="must not contain"):
            writer.write({"__key__": "a.b", "bin": b"x"})
        with pytest.raises(TypeError, match="cannot encode"):
            writer.write({"__key__": "a", "obj": object()})
