"""``conveyor shards write`` / ``inspect`` through the real argument parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conveyor.cli.main import build_parser, main
from conveyor.cli.shards import parse_size
from conveyor.formats import iter_samples


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    (root / "sub").mkdir(parents=True)
    for i in range(5):
        (root / f"{i:06d}.jpg").write_bytes(b"jpeg" * (i + 1))
        (root / f"{i:06d}.cls").write_text(str(i))
    (root / "sub" / "000009.txt").write_text("nine")
    (root / "README").write_text("ignored: no extension")
    return root


def test_write_then_inspect(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = str(tmp_path / "out" / "d-%03d.tar")
    assert main(["shards", "write", str(source), pattern, "--max-count", "2"]) == 0
    written = capsys.readouterr().out
    assert "wrote 6 samples into 3 shard(s)" in written
    shards = sorted((tmp_path / "out").glob("*.tar"))
    samples = [s for shard in shards for s in iter_samples(str(shard))]
    assert [s["__key__"] for s in samples] == [f"{i:06d}" for i in range(5)] + ["sub/000009"]
    assert samples[2] == {"__key__": "000002", "__url__": str(shards[1]),
                          "cls": b"2", "jpg": b"jpeg" * 3}  # fmt: skip

    assert main(["shards", "inspect", str(tmp_path / "out" / "d-{000..002}.tar")]) == 0
    report = capsys.readouterr().out
    assert "total: 3 shards, 6 samples, 11 members" in report
    assert ".jpg" in report and "first keys: 000000, 000001" in report

    assert main(["shards", "inspect", "--json", str(shards[0])]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["samples"] == 2 and parsed["extensions"]["jpg"] == {"count": 2, "bytes": 12}


def test_write_limits_and_shuffle(source: Path, tmp_path: Path) -> None:
    pattern = str(tmp_path / "s-%d.tar")
    assert main(["shards", "write", str(source), pattern, "--max-size", "4.2KB", "--shuffle"]) == 0
    shards = sorted(tmp_path.glob("s-*.tar"))
    keys = [s["__key__"] for shard in shards for s in iter_samples(str(shard))]
    assert len(shards) == 3 and sorted(keys) != keys and len(keys) == 6


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["shards", "inspect", str(tmp_path / "missing.tar")]) == 1
    assert "conveyor shards: error:" in capsys.readouterr().err
    assert main(["shards", "write", str(tmp_path / "nodir"), "x-%d.tar"]) == 1
    assert build_parser().parse_args([]).command is None  # main() prints the help: exit 2


def test_parse_size() -> None:
    assert parse_size("4096") == 4096 and parse_size("1.5kb") == 1500
    assert parse_size("2MiB") == 2 * 2**20 and parse_size("1G") == 10**9
