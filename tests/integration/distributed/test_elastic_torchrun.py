"""Elastic stream resume under real torchrun jobs: a checkpoint of 2 ranks x 2 workers
resumes on 3 ranks x 1 worker, or on 1 rank without workers, exactly once."""

from __future__ import annotations

import pickle
from pathlib import Path

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
