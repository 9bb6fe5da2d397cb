"""The GPU benchmarks still run: each script's ``--smoke`` mode (tiny sizes, on the CPU).

No figure from these runs means anything; they keep the scripts that a GPU session runs
(scripts/gpu_check.sh) from rotting between such sessions. ~10 s together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("script", ["gpu_h2d.py", "gpu_decode.py", "gpu_train.py"])
def test_smoke_run(script: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    env = dict(os.environ, BENCH_DATA_DIR=str(tmp_path), PYTHONWARNINGS="ignore")
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--smoke", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) >= 3 and "machine" in records[0]
