"""``conveyor shards write`` / ``inspect`` through the real argument parser."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
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


def _write(source: Path, pattern: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """The real command in its own process: a hang is a timeout here, not a stuck suite."""
    command = [sys.executable, "-m", "conveyor.cli.main", "shards", "write", str(source), pattern]
    return subprocess.run(
        [*command, *flags], capture_output=True, text=True, timeout=60, check=False
    )


def _packed(pattern_dir: Path) -> dict[str, bytes]:
    members = {}
    for shard in sorted(pattern_dir.glob("*.tar")):
        for sample in iter_samples(str(shard)):
            for ext, data in sample.items():
                if not ext.startswith("__"):
                    members[f"{sample['__key__']}.{ext}"] = data
    return members


def test_write_skips_fifos_and_sockets_with_a_warning(source: Path, tmp_path: Path) -> None:
    os.mkfifo(source / "000007.pipe")  # a reader blocks on it forever
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(source / "000008.sock"))
        result = _write(source, str(tmp_path / "out" / "f-%d.tar"))
    assert result.returncode == 0, result.stderr
    assert "skipped 2 special file(s)" in result.stderr and "000007.pipe" in result.stderr
    packed = _packed(tmp_path / "out")
    assert "000007.pipe" not in packed and "000001.jpg" in packed


def test_write_does_not_follow_links_out_of_the_source(source: Path, tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("not for the shard")
    os.symlink(secret, source / "000010.txt")  # out of the tree
    os.symlink(source / "000001.cls", source / "000011.cls")  # inside: packed
    os.symlink(tmp_path / "nothing", source / "000012.txt")  # broken
    result = _write(source, str(tmp_path / "out" / "l-%d.tar"))
    assert result.returncode == 0, result.stderr
    assert "skipped 1 symlink(s) pointing outside" in result.stderr
    assert "--follow-external-symlinks" in result.stderr
    packed = _packed(tmp_path / "out")
    assert "000010.txt" not in packed and packed["000011.cls"] == b"1"
    assert b"not for the shard" not in b"".join(packed.values())

    followed = _write(source, str(tmp_path / "out2" / "l-%d.tar"), "--follow-external-symlinks")
    assert followed.returncode == 0, followed.stderr
    assert _packed(tmp_path / "out2")["000010.txt"] == b"not for the shard"
