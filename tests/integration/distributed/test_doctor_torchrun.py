"""loader.doctor() under real torchrun (2 ranks, gloo): rank 1's data is slow, rank 0's is
not, and the step all-reduces, so rank 0 waits for rank 1 inside its step. Each rank's
doctor sees only its own loader; they exchange timings over the process group, and both
must name the imbalance, rank 1's fix, and confirm it with the same counterfactual run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_torchrun import torchrun

pytestmark = pytest.mark.timeout(180)


def test_rank_imbalance_is_named_on_every_rank(tmp_path: Path) -> None:
    out = tmp_path / "ranks.json"
    torchrun("doctor_job.py", str(out), "24")
    ranks = json.loads(out.read_text())
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["bottleneck"] == "rank imbalance", r
        assert "rank 1's loader" in r["evidence"]
        assert r["fix_changes"]["num_workers"] >= 3  # rank 1's I/O-latency fix, on both
        assert r["predicted_gain"] > 1.0
        assert r["measured_gain"] is not None and r["measured_gain"] > 0.8
    assert ranks[0]["fix_changes"] == ranks[1]["fix_changes"]
