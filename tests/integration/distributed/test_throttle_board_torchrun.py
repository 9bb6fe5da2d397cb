"""Throttles heard across the ranks of a torchrun job on one machine: separate process
trees, which each paid their own start-up burst of throttles before they shared a board."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from test_torchrun import torchrun

from conveyor.storage.shared_throttles import last_throttle

pytestmark = pytest.mark.timeout(180)


def test_a_throttle_heard_by_one_rank_reaches_the_other_and_its_workers(tmp_path: Path) -> None:
    out = tmp_path / "ranks.json"
    host = f"board-{uuid.uuid4().hex}"
    torchrun("throttle_board_job.py", str(out), host, rdzv_id=f"test-{uuid.uuid4().hex}")
    ranks = json.loads(out.read_text())
    assert [r["before"] for r in ranks] == [False, False]
    assert [(r["heard"], r["worker_heard"]) for r in ranks] == [(True, True), (True, True)]
    assert last_throttle(host) is None  # this process is no rank of that job
