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


def torchrun(
    script: str, *args: str, nproc: int = 2, timeout_s: float = 120, rdzv_id: str | None = None
) -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        *([f"--rdzv-id={rdzv_id}"] if rdzv_id else []),  # the job's TORCHELASTIC_RUN_ID
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
    for r in ranks:
        assert r["sharded_warnings"] == []
        (warning,) = r["plain_warnings"]  # once per loader, not per epoch
        assert "world_size=2" in warning and "RandomSampler" in warning
    assert {r["batches"] for r in ranks} == {-(-per_rank // 4)}


def test_datapipe_graph_shards_across_ranks_and_workers(tmp_path: Path) -> None:
    out = tmp_path / "seen.json"
    torchrun("datapipe_job.py", str(out), "64", "0")
    ranks = json.loads(out.read_text())
    orders = []
    for epoch in ("0", "1", "2"):
        seen = [r["seen"][epoch] for r in ranks]
        assert sorted(seen[0] + seen[1]) == list(range(64))  # each sample exactly once
        orders.append(seen[0] + seen[1])
    assert orders[0] != orders[1] != orders[2]  # reshuffled every epoch


def test_fullsync_gives_every_rank_the_same_number_of_batches(tmp_path: Path) -> None:
    # 2 ranks x 2 workers = 4 shards of 65 items: 17, 16, 16, 16; shard = worker * 2 + rank,
    # so with batch 4 rank 0 has 5 + 4 batches and rank 1 has 4 + 4.
    out = tmp_path / "seen.json"
    torchrun("datapipe_job.py", str(out), "65", "1")
    ranks = json.loads(out.read_text())
    for epoch in ("0", "1", "2"):
        counts = [r["batches"][epoch] for r in ranks]
        assert counts == [8, 8]
        union = ranks[0]["seen"][epoch] + ranks[1]["seen"][epoch]
        assert len(union) == len(set(union))  # nothing twice


def test_without_fullsync_uneven_shards_give_uneven_batches(tmp_path: Path) -> None:
    """The failure fullsync prevents: here rank 0 gets more batches than rank 1."""
    out = tmp_path / "seen.json"
    torchrun("datapipe_job.py", str(out), "65", "0")
    ranks = json.loads(out.read_text())
    counts = [r["batches"]["0"] for r in ranks]
    assert counts == [9, 8]
    assert sorted(ranks[0]["seen"]["0"] + ranks[1]["seen"]["0"]) == list(range(65))


def test_torch_datapipes_load_on_two_ranks_as_torchs_loader_loads_them(tmp_path: Path) -> None:
    """torch's own DataPipe graph: conveyor's loader gives each rank exactly what torch's
    gives it (0 and 2 workers, two epochs); and a conveyor graph under torch's loader with
    2 workers shards itself across workers and ranks: nothing twice, nothing lost."""
    out = tmp_path / "seen.json"
    torchrun("torch_datapipe_job.py", str(out), timeout_s=240)
    ranks = json.loads(out.read_text())
    assert [r["rank"] for r in ranks] == [0, 1]
    for workers in ("0", "2"):
        for r in ranks:
            assert r["runs"][f"conveyor-{workers}"] == r["runs"][f"torch-{workers}"]
        for epoch in (0, 1):
            union = [i for r in ranks for i in r["runs"][f"conveyor-{workers}"][epoch]]
            assert sorted(union) == list(range(64))
    for epoch in (0, 1):
        union = [i for r in ranks for i in r["runs"]["conveyor-graph-in-torch-2"][epoch]]
        assert sorted(union) == list(range(64))
