"""worker_type="ray" with default arguments: "a lost actor or node costs no sample" holds.

The job runs in a process of its own, with a Ray cluster of its own (two worker nodes of 8
CPUs, a head without CPUs: tests/ray_workers/lost_node_job.py), because the package's
shared cluster cannot gain a node after losing one. Before issue #34, Ray packed the
actors on one node and none was replaced (max_worker_restarts was 0): losing that node
ended the epoch with WorkerDiedError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray]
HERE = Path(__file__).resolve().parent


@pytest.mark.timeout(400)
def test_a_lost_node_costs_no_sample_with_default_arguments(tmp_path: Path) -> None:
    if os.environ.get("RAY_ADDRESS"):
        pytest.skip("RAY_ADDRESS is set: this test starts its own local cluster")
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(HERE / "lost_node_job.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    result = json.loads(out.read_text())
    for name in ("map", "stream"):
        nodes = set(result["spread"][name]) - {"?"}  # "?": an actor not started yet
        assert len(nodes) == 2, f"{name}: the actors were not spread over both nodes"
        run = result[name]
        assert run["batches"] == run["expected"]  # torch's epoch: nothing lost or repeated
    lost = result["stream"]["lost"]
    assert lost and all(f"on node {result['doomed']}" in worker for worker in lost)
