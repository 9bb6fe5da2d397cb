"""Elastic stream resume under real torchrun jobs: a checkpoint of 2 ranks x 2 workers
resumes on 3 ranks x 1 worker, or on 1 rank without workers, exactly once."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from elastic_stream_job import SHARDS
from test_torchrun import torchrun

from conveyor import merge_checkpoints

ALL = sorted(x for shard in SHARDS for x in shard)


def run(tmp_path: Path, name: str, nproc: int, workers: int, take: int, state: Path | None):
    out = tmp_path / f"{name}.pkl"
    args = [str(out), str(workers), str(take)] + ([str(state)] if state else [])
    torchrun("elastic_stream_job.py", *args, nproc=nproc)
    return pickle.loads(out.read_bytes())


@pytest.mark.parametrize(("nproc", "workers"), [(3, 1), (1, 0)])
def test_two_ranks_checkpoint_resumes_on_another_world_size(
    tmp_path: Path, nproc: int, workers: int
) -> None:
    first = run(tmp_path, "first", nproc=2, workers=2, take=4, state=None)
    assert [r["rank"] for r in first] == [0, 1]
    delivered = [x for r in first for x in r["samples"]]
    assert len(delivered) == 2 * 4 * 2  # every rank took its 4 batches of 2
    with pytest.raises(ValueError, match="one checkpoint of each of the 2 ranks"):
        merge_checkpoints([first[0]["state"]])
    merged = merge_checkpoints([r["state"] for r in first])
    state = tmp_path / "merged.pkl"
    state.write_bytes(pickle.dumps(merged))
    second = run(tmp_path, "second", nproc=nproc, workers=workers, take=-1, state=state)
    rest = [x for r in second for x in r["samples"]]
    assert all(r["samples"] for r in second)  # every new rank got work
    assert sorted(delivered + rest) == ALL  # every remaining sample once, none again


SIZES = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8)
TAR_KEYS = sorted(f"{s:02d}-{i:02d}" for s, size in enumerate(SIZES) for i in range(size))


def _tar_shards(root: Path) -> Path:
    from conveyor.formats import ShardWriter

    for s, size in enumerate(SIZES):
        with ShardWriter(str(root / f"part-{s:02d}-%d.tar")) as writer:
            for i in range(size):
                writer.write({"__key__": f"{s:02d}-{i:02d}", "txt": "x" * (50 + 31 * i)})
    return root


@pytest.mark.parametrize(("nproc", "workers"), [(3, 1), (1, 2)])
def test_tar_shards_of_two_ranks_resume_on_another_world_size(
    tmp_path: Path, nproc: int, workers: int
) -> None:
    """Shards in progress and shuffle buffers of 2 ranks x 2 workers, dealt out again."""
    shard_dir = _tar_shards(tmp_path)

    def job(name: str, nproc: int, workers: int, take: int, state: Path | None) -> Any:
        out = tmp_path / f"{name}.pkl"
        args = [str(out), str(shard_dir), str(workers), str(take)]
        torchrun("elastic_tar_job.py", *args + ([str(state)] if state else []), nproc=nproc)
        return pickle.loads(out.read_bytes())

    first = job("first", 2, 2, 4, None)
    delivered = [x for r in first for x in r["samples"]]
    assert len(delivered) == 2 * 4 * 2
    merged = merge_checkpoints([r["state"] for r in first])
    state = tmp_path / "merged.pkl"
    state.write_bytes(pickle.dumps(merged))
    second = job("second", nproc, workers, -1, state)
    rest = [x for r in second for x in r["samples"]]
    assert sorted(delivered + rest) == TAR_KEYS  # every remaining sample once, none again
