"""Real multi-process jobs under torchrun (gloo, CPU): exactly-once coverage per epoch."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(script: str, *args: str, nproc: int = 2, timeout_s: float = 120) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        str(HERE / script),
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        pytest.fail(f"torchrun failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


@pytest.mark.parametrize(("n", "drop_last"), [(50, False), (51, False), (51, True)])
def test_distributed_sampler_exactly_once_per_epoch(
    tmp_path: Path, n: int, drop_last: bool
) -> None:
    out = tmp_path / "seen.json"
    torchrun("sampler_job.py", str(out), str(n), "1" if drop_last else "0")
    ranks = json.loads(out.read_text())
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world"] for r in ranks} == {2}
    per_rank = -(-n // 2) if not drop_last else n // 2
    orders = []
    for epoch in ("0", "1", "2"):
        seen = [r["seen"][epoch] for r in ranks]
        assert [len(s) for s in seen] == [per_rank, per_rank]  # equal shards: no DDP hang
        union = sorted(seen[0] + seen[1])
        if drop_last:
            assert len(set(union)) == len(union) == 2 * per_rank  # no duplicates, none padded
        elif n % 2 == 0:
            assert union == list(range(n))  # exactly once
        else:
            assert set(union) == set(range(n))  # every sample, one padded repeat
            assert len(union) == n + 1
        orders.append(seen[0])
    assert orders[0] != orders[1] and orders[1] != orders[2]  # set_epoch reshuffles
    assert {r["batches"] for r in ranks} == {-(-per_rank // 4)}
