"""Unmodified Lightning with conveyor loaders: distributed sampling, order, predictions.

The job (lightning_job.py) runs once with torch's DataLoader and once with conveyor's, two
CPU ranks over gloo; each rank records the samples it trained on, validated and
predicted. conveyor must match torch: Lightning injects its DistributedSampler into a
conveyor loader (each rank gets its half), the same shuffle order per rank, and
prediction writers get the batch indices.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning", reason="the frameworks extra (pip install conveyor[frameworks])")
pytestmark = [pytest.mark.frameworks, pytest.mark.timeout(300)]

JOB = Path(__file__).with_name("lightning_job.py")


def run_job(loader: str, strategy: str, out: Path) -> dict[str, Any]:
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), PL_DISABLE_FORK="0")
    result = subprocess.run(
        [sys.executable, str(JOB), "--loader", loader, "--strategy", strategy, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
        cwd=out,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    ranks: dict[str, Any] = {}
    for rank in (0, 1):
        ranks[f"fit{rank}"] = json.loads((out / f"fit-rank{rank}.json").read_text())
        ranks[f"predict{rank}"] = json.loads((out / f"predict-rank{rank}.json").read_text())
    return ranks


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_two_ranks_train_on_their_halves_in_torchs_order(tmp_path: Path, strategy: str) -> None:
    theirs = run_job("torch", strategy, tmp_path / "torch")
    ours = run_job("conveyor", strategy, tmp_path / "conveyor")
    halves = [ours[f"fit{rank}"]["seen"]["train"] for rank in (0, 1)]
    assert [len(half) for half in halves] == [32, 32]  # not 64 each: the sampler was injected
    assert sorted(halves[0] + halves[1]) == list(range(64))
    for rank in (0, 1):
        assert ours[f"fit{rank}"]["seen"] == theirs[f"fit{rank}"]["seen"]  # order, val too
        assert ours[f"fit{rank}"]["loader_types"] == ["conveyor.dataloader.DataLoader"]
        assert ours[f"predict{rank}"] == theirs[f"predict{rank}"]  # indices and values
        for indices, values in ours[f"predict{rank}"]:
            assert indices and indices == values  # the dataset's sample i is the value i
