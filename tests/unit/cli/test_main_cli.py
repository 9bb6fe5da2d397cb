"""The ``conveyor`` command itself: version, help with defaults, exit statuses, ``demo``.

In process through ``main([...])`` and as the installed entry point in a subprocess.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import conveyor
from conveyor.bench import Comparison
from conveyor.bench.plot import panels
from conveyor.cli.main import COMMANDS, build_parser, main
from conveyor.cli.parsing import EXIT_CODES

ENTRY_POINT = Path(sys.executable).parent / "conveyor"
TINY_DEMO = ["demo", "--samples", "48", "--per-shard", "12", "--epochs", "1", "--side", "32",
             "--crop", "24", "--batch-size", "8"]  # fmt: skip


def run_entry_point(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENTRY_POINT), *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    """``{"conveyor shards write": parser, ...}``: every parser of the command tree."""
    found = {}
    pending = [build_parser()]
    while pending:
        parser = pending.pop()
        found[parser.prog] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
    return found


def test_version_in_process_matches_the_installed_metadata(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"conveyor {conveyor.__version__} (torch ")
    assert conveyor.__version__ == importlib.metadata.version("conveyor")


def test_bare_conveyor_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: conveyor")
    for name in COMMANDS:
        assert f"    {name} " in out
    assert EXIT_CODES in out


def test_a_group_without_its_action_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["shards"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: conveyor shards") and "inspect" in out and "write" in out


def test_every_help_shows_defaults_and_exit_statuses() -> None:
    parsers = all_parsers()
    assert {"conveyor", "conveyor demo", "conveyor bench", "conveyor shards write"} <= set(parsers)
    for prog, parser in parsers.items():
        text = parser.format_help()
        assert "exit status:" in text, prog
        for action in parser._actions:
            default = action.default
            if action.option_strings and default not in (None, False, argparse.SUPPRESS):
                shown = f"(default: {default})"
                assert shown in " ".join(text.split()), f"{prog} {action.option_strings[0]}"
    write = " ".join(parsers["conveyor shards write"].format_help().split())
    assert "(default: 10000)" in write and "(default: 1GB)" in write


def test_size_default_is_parsed_like_a_given_value() -> None:
    args = build_parser().parse_args(["shards", "write", "src", "out-%d.tar"])
    assert args.max_size == 10**9 and args.max_count == 10_000
    args = build_parser().parse_args(["bench"])
    assert args.num_workers == (0, 1, 2) and args.scenarios == ("s1", "s2", "s3", "s4")


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["bogus"], ["shards", "write"], ["demo", "--epochs", "x"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2, argv
        assert "error:" in capsys.readouterr().err


def test_demo_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TINY_DEMO, "--num-workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "wrote 48 JPEGs (32x32) into 4 tar shards" in out
    assert "epoch 0: 48 images" in out and "2 worker processes" in out


def test_demo_without_pillow_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)
    assert main(TINY_DEMO) == 1
    captured = capsys.readouterr()
    assert "conveyor demo: error:" in captured.err
    assert "pip install conveyor[image]" in captured.err
    assert "wrote" not in captured.out


def test_entry_point_version_help_and_exit_statuses(tmp_path: Path) -> None:
    version = run_entry_point("--version")
    assert version.returncode == 0
    assert version.stdout.strip().startswith(f"conveyor {conveyor.__version__} (torch ")
    bare = run_entry_point()
    assert bare.returncode == 2 and bare.stdout.startswith("usage: conveyor")
    assert run_entry_point("bogus").returncode == 2
    failed = run_entry_point("shards", "inspect", str(tmp_path / "missing.tar"))
    assert failed.returncode == 1
    assert failed.stderr.startswith("conveyor shards: error:")
    assert len(failed.stderr.strip().splitlines()) == 1


def test_entry_point_demo() -> None:
    done = run_entry_point(*TINY_DEMO, "--num-workers", "1", timeout_s=90)
    assert done.returncode == 0, done.stderr
    assert "epoch 0: 48 images" in done.stdout and done.stdout.rstrip().endswith("removed")


def test_plot_panels_tell_batch_sizes_apart_in_the_table_units() -> None:
    def s2(batch_size: int, workers: int) -> Comparison:
        params = {"scenario_id": "s2", "batch_size": batch_size, "num_workers": workers}
        return Comparison(f"S2 ints bs{batch_size} nw{workers}", "us/batch", [5.0], [20.0],
                          params=params)  # fmt: skip

    s4 = Comparison("S4 fork nw2", "s", [0.1], [0.2], params={"scenario_id": "s4",
                    "num_workers": 2, "context": "fork"})  # fmt: skip
    found = panels([s2(1, 0), s2(32, 0), s2(1, 2), s2(32, 2), s4])
    titles = [title for title, _ in found]
    assert titles == [
        "S2 tiny items (ints), batch size 1\nus/batch (lower is better)",
        "S2 tiny items (ints), batch size 32\nus/batch (lower is better)",
        "S4 time to first batch\nseconds (lower is better)",
    ]
    assert [[r.name for r in rows] for _, rows in found[:2]] == [
        ["S2 ints bs1 nw0", "S2 ints bs1 nw2"],
        ["S2 ints bs32 nw0", "S2 ints bs32 nw2"],
    ]


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [("--samples", "0", "--samples must be at least 1"), ("--crop", "100", "larger than")],
)
def test_demo_options_it_cannot_run_with_end_in_one_line(
    option: str, value: str, says: str
) -> None:
    """Checked before any work: one line on stderr, not tracebacks from the workers."""
    done = run_entry_point("demo", option, value)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("conveyor demo: error:") and says in lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_the_demo_model_learns_without_knowing_it_all_after_one_epoch() -> None:
    done = run_entry_point("demo", "--epochs", "3", "--num-workers", "0", timeout_s=300)
    assert done.returncode == 0, done.stderr
    losses = [
        float(line.split("loss ")[1].split(",")[0])
        for line in done.stdout.splitlines()
        if line.startswith("epoch ")
    ]
    assert len(losses) == 3
    assert losses[0] > 0.3  # the first epoch has not learnt it all
    assert losses[2] < losses[0] * 0.6  # but it learns


def test_version_answers_without_importing_torch_or_conveyor() -> None:
    """`conveyor --version` took 1.3-4.7 s: importing conveyor imports torch."""
    code = (
        "import sys, conveyor_cli; conveyor_cli.main(['--version']); "
        "print(sorted(m for m in ('torch', 'conveyor') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    version_line, imported = done.stdout.strip().splitlines()
    assert version_line == run_entry_point("--version").stdout.strip()
    assert version_line.startswith(f"conveyor {conveyor.__version__} (torch ")
    assert imported == "[]"
