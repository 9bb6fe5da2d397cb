"""The GPU checks still run: ``scripts/gpu_check.sh smoke`` runs the very benchmark commands
a GPU session runs, with ``--smoke`` (tiny sizes, on the CPU).

No figure from these runs means anything; they keep the one command of a GPU session
(README, "Contributing") from rotting between such sessions. ~25 s.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ("gpu_h2d", "gpu_decode", "gpu_train", "scaling")


def gpu_check(out: Path, *stages: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, OUT=str(out), PY=sys.executable, PYTHONWARNINGS="ignore",
                   BENCH_DATA_DIR=str(out / "data"), **env)  # fmt: skip
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), *stages],
        env=environ,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )


@pytest.mark.timeout(420)
def test_smoke_runs_every_benchmark_command(tmp_path: Path) -> None:
    done = gpu_check(tmp_path, "smoke")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for name in BENCHMARKS:
        assert re.search(rf"^== smoke {name}: exit 0 in", done.stdout, re.M), done.stdout[-4000:]
        lines = (tmp_path / f"smoke-{name}.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert len(records) >= 3 and "machine" in records[0]
    assert "conveyor" in (tmp_path / "machine.txt").read_text()


@pytest.mark.timeout(60)
@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks the refusal where CUDA is absent"
)
def test_gpu_stages_refuse_to_pass_without_cuda(tmp_path: Path) -> None:
    done = gpu_check(tmp_path, "tests", "h2d")
    assert done.returncode == 3 and "no CUDA here" in done.stdout
    assert not (tmp_path / "tests.xml").exists()
