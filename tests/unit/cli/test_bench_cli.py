"""``conveyor bench`` through the real argument parser, in process, on tiny settings."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from conveyor.bench import Comparison, interleave
from conveyor.cli.main import main

QUICK_S2 = ["bench", "--quick", "--scenarios", "s2", "--reps", "1", "--num-workers", "0"]
RATIO = re.compile(r"\d+\.\d\dx")


def test_s2_table_has_both_loaders_and_a_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(QUICK_S2) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("scenario"))
    assert header.split() == ["scenario", "unit", "conveyor", "torch", "advantage"]
    rows = [line for line in out.splitlines() if line.startswith("S2 ")]
    assert [row.split()[:4] for row in rows] == [
        ["S2", "ints", "bs1", "nw0"],
        ["S2", "ints", "bs32", "nw0"],
    ]
    for row in rows:
        assert "us/batch" in row and RATIO.search(row)
        assert row.count("[") == 2  # median [min-max] for each loader


def test_json_lines_parse(tmp_path: Path) -> None:
    out = tmp_path / "bench.jsonl"
    assert main([*QUICK_S2, "--json", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["scenario_id"], r["batch_size"], r["num_workers"]) for r in rows] == [
        ("s2", 1, 0),
        ("s2", 32, 0),
    ]
    for row in rows:
        assert row["reps"] == 1 and row["unit"] == "us/batch" and row["advantage"] > 0
        assert row["conveyor"] > 0 and row["torch"] > 0 and not row["higher_is_better"]


@pytest.fixture(scope="module")
def _matplotlib_fonts(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Load matplotlib's process-wide font cache (open font files) before the leak guard."""
    from conveyor.bench.plot import save_plot

    rows = [
        Comparison(f"S{i}", "s", [1.0], [2.0], params={"scenario_id": f"s{i}", "num_workers": 1,
                                                       "batch_size": 1, "context": "fork"})
        for i in range(1, 5)
    ]  # fmt: skip
    save_plot(rows, str(tmp_path_factory.mktemp("fonts") / "warm.png"), "warm-up")


@pytest.mark.usefixtures("_matplotlib_fonts")
def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.png"
    argv = [*QUICK_S2[:-1], "0,1", "--plot", str(out)]
    assert main(argv) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot written to {out}" in capsys.readouterr().out


def test_plot_without_matplotlib_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main([*QUICK_S2, "--plot", str(tmp_path / "x.png")]) == 1
    captured = capsys.readouterr()
    assert "pip install conveyor[plot]" in captured.err
    assert "S2" not in captured.out  # failed before measuring


def test_s1_and_s3_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--quick", "--scenarios", "s1,s3", "--reps", "1", "--num-workers", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"^S1 tensors bs64 nw0 +MB/s .*x$", out, re.MULTILINE)
    assert re.search(r"^S3 jpeg bs64 nw0 +img/s .*x$", out, re.MULTILINE)


def test_s4_thread_start_in_fresh_processes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--quick", "--scenarios", "s4", "--contexts", "thread", "--num-workers", "1"]
    assert main(argv) == 0
    assert re.search(r"^S4 thread nw1 \(torch fork\) +s .*x$", capsys.readouterr().out, re.M)


@pytest.mark.parametrize(
    "bad", [["--scenarios", "s9"], ["--num-workers", "a"], ["--reps", "0"], ["--contexts", "x"]]
)
def test_bad_arguments_exit_2(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *bad])
    assert exit_info.value.code == 2
    assert "conveyor bench: error:" in capsys.readouterr().err


def test_interleave_is_abba_and_ratio_favours_conveyor_above_one() -> None:
    calls: list[str] = []
    ours, theirs = interleave(4, lambda: calls.append("A") or 1.0, lambda: calls.append("B") or 2.0)
    assert "".join(calls) == "ABBAABBA" and ours == [1.0] * 4 and theirs == [2.0] * 4
    assert Comparison("t", "s", ours, theirs).ratio() == 2.0  # half the time: 2x better
    assert Comparison("r", "MB/s", theirs, ours, higher_is_better=True).ratio() == 2.0
