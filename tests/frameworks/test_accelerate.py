"""accelerate, unmodified, with conveyor loaders (after the one-line integration).

``Accelerator.prepare`` rebuilds loaders from a DataLoader class it names itself; with
`conveyor.integrations.use_conveyor_in_accelerate` that is conveyor's, so conveyor's
engine keeps loading (its ``stats()`` count the samples), each process gets its share,
and ``skip_first_batches`` hands back a conveyor loader too.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("accelerate", reason="the frameworks extra")
pytestmark = [pytest.mark.frameworks, pytest.mark.timeout(240)]

JOB = Path(__file__).with_name("accelerate_job.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(out: Path, nproc: int) -> list[dict[str, object]]:
    if nproc == 1:
        cmd = [sys.executable, str(JOB), str(out)]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={nproc}",
            "--master_addr=127.0.0.1",
            f"--master_port={_free_port()}",
            str(JOB),
            str(out),
        ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=200, env=env, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(Path(f"{out}-rank{rank}.json").read_text()) for rank in range(nproc)]


def test_prepare_keeps_conveyors_engine_in_one_process(tmp_path: Path) -> None:
    (record,) = run(tmp_path / "one", 1)
    assert record["base"] == "conveyor.dataloader.DataLoader"
    assert record["seen"] == list(range(64))
    assert record["stats_samples"] == 64  # conveyor's counters: its engine did the loading
    assert record["after_skip"] == list(range(8, 64))
    assert record["resumed"] == list(range(64))  # save_state, load_state, skip: exact


def test_two_processes_get_their_shares(tmp_path: Path) -> None:
    records = run(tmp_path / "two", 2)
    assert [r["world"] for r in records] == [2, 2]
    assert all(r["base"] == "conveyor.dataloader.DataLoader" for r in records)
    seen = [r["seen"] for r in records]
    assert [len(s) for s in seen] == [32, 32]  # 32 a process, not 64: sharded
    assert sorted(seen[0] + seen[1]) == list(range(64))
    for record in records:
        assert record["after_skip"] == record["seen"][8:]
        assert record["resumed"] == record["seen"]
