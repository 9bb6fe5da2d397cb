"""GlobalShuffleSampler under real torchrun jobs: one global order, resumed on more ranks."""

from __future__ import annotations

import json
from pathlib import Path

from test_torchrun import torchrun

from conveyor import GlobalShuffleSampler


def interleave(outputs: list[list[int]]) -> list[int]:
    return [index for group in zip(*outputs, strict=True) for index in group]


def test_checkpoint_on_two_ranks_resumes_on_three(tmp_path: Path) -> None:
    n, take = 101, 17
    reference = GlobalShuffleSampler(n, seed=7, num_replicas=1, rank=0)
    reference.set_epoch(1)
    order = reference.permutation().tolist()

    first = tmp_path / "two.json"
    torchrun("global_shuffle_job.py", str(first), str(n), str(take), nproc=2)
    two = json.loads(first.read_text())
    assert [r["world"] for r in two] == [2, 2]  # defaults came from the process group
    assert interleave([r["taken"] for r in two]) == order[: 2 * take]
    assert {r["state"]["position"] for r in two} == {2 * take}
    loaded = interleave([r["loaded"] for r in two])  # the DataLoader path, 2 workers
    assert loaded[:n] == order and loaded[n:] == order[: len(loaded) - n]

    state_path = tmp_path / "state.json"
    state_path.write_text(json.dumps(two[0]["state"]))
    second = tmp_path / "three.json"
    torchrun("global_shuffle_job.py", str(second), str(n), str(n), str(state_path), nproc=3)
    three = json.loads(second.read_text())
    assert [r["world"] for r in three] == [3, 3, 3]
    rest = interleave([r["taken"] for r in three])
    assert rest[: n - 2 * take] == order[2 * take :]  # every remaining sample, once
    assert len(rest) == 3 * -(-(n - 2 * take) // 3)  # padded so ranks stay equal
