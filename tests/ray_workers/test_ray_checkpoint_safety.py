"""Ray workers: a tampered checkpoint (a pickle where a worker's state goes) is refused in
the main process; nothing reaches an actor, nothing runs (tests/integration/
test_checkpoint_safety.py does the same for process and thread workers)."""

from __future__ import annotations

import base64
import pickle
from pathlib import Path
from typing import Any

import pytest

from conveyor import DataLoader
from conveyor.stateful_dataloader import StatefulDataLoader

from sample_datasets import CountedStream, WritesFile

pytestmark = [pytest.mark.ray, pytest.mark.leaks_owned_by("ray_cluster")]

RAY = {"worker_type": "ray", "ray_remote_args": {"num_cpus": 0}}


def _loader(cls: type) -> Any:
    return cls(CountedStream(16), batch_size=2, num_workers=2, **RAY)


@pytest.mark.parametrize("cls", [DataLoader, StatefulDataLoader])
@pytest.mark.parametrize("version", [1, 2])
def test_a_pickled_worker_state_never_runs_in_an_actor(
    ray_cluster: Any, tmp_path: Path, cls: type, version: int
) -> None:
    marker = tmp_path / "pwned"
    loader = _loader(cls)
    iterator = iter(loader)
    head = [next(iterator).tolist() for _ in range(3)]
    state = loader.state_dict()
    del iterator
    ours = state.get("_conveyor", state)
    assert ours["workers"]["states"] == [{"next": 8}, {"next": 5}]  # plain, per actor
    payload = pickle.dumps(WritesFile(str(marker)))
    blob: Any = payload
    if cls is StatefulDataLoader:
        blob = {"__bytes__": base64.b64encode(payload).decode("ascii")}
    ours["workers"]["states"][0] = blob
    ours["version"] = version
    resumed = _loader(cls)
    error = ValueError if version == 1 else TypeError
    with pytest.raises(error, match=r"version 1|bytes at workers\.states\[0\]"):
        resumed.load_state_dict(state)
    rest = [batch.tolist() for batch in resumed]  # a fresh epoch: the state was refused
    assert sorted(x for batch in rest for x in batch) == list(range(16))
    assert head == rest[:3]
    assert not marker.exists()
