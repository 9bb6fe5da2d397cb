"""A checkpoint never runs code: tampered blobs are refused, nothing is unpickled.

A checkpoint loaded the safe way (``torch.load(weights_only=True)``) used to carry pickled
worker states into ``load_state_dict()``, which unpickled them in the workers: a tampered
one ran an attacker's command when the loader started. Each test here builds the payload
(unpickling it creates a file), hides it where a worker's state goes, and checks that the
loader raises a clear error and the file never appears.
"""

from __future__ import annotations

import base64
import io
import pickle
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conveyor import DataLoader
from conveyor.datapipes.iter import IterableWrapper
from conveyor.state import unpickle_legacy_checkpoint
from conveyor.stateful_dataloader import StatefulDataLoader

from sample_datasets import CountedStream, WritesFile

KINDS = ["process", "thread"]
LOADERS = [DataLoader, StatefulDataLoader]


def _weights_only(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _loader(cls: type, worker_type: str, dataset: Any = None) -> Any:
    return cls(
        dataset if dataset is not None else CountedStream(24),
        batch_size=2,
        num_workers=2,
        worker_type=worker_type,
    )


def _conveyor_part(state: dict[str, Any]) -> dict[str, Any]:
    """Where a loader's own state sits: the top, or StatefulDataLoader's "_conveyor"."""
    ours: dict[str, Any] = state.get("_conveyor", state)
    return ours


def _blob(payload: bytes, cls: type) -> Any:
    """The payload as the loader's layout spells bytes (StatefulDataLoader: JSON)."""
    if cls is StatefulDataLoader:
        return {"__bytes__": base64.b64encode(payload).decode("ascii")}
    return payload


def _tampered(cls: type, worker_type: str, marker: Path, version: int) -> Any:
    loader = _loader(cls, worker_type)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    state = loader.state_dict()
    del iterator
    ours = _conveyor_part(state)
    assert ours["workers"]["states"][0] == {"next": 8}  # plain: the dataset's own dict
    ours["workers"]["states"][0] = _blob(pickle.dumps(WritesFile(str(marker))), cls)
    ours["version"] = version
    return _weights_only(state)  # loading the file safely does not help on its own


@pytest.mark.parametrize(
    ("version", "error", "message"),
    [
        (2, TypeError, r"not plain data: bytes at workers\.states\[0\]"),
        (1, ValueError, r"version 1.*workers \[0\] are pickles"),  # names its version
    ],
    ids=["current", "version-1"],
)
@pytest.mark.parametrize("cls", LOADERS)
@pytest.mark.parametrize("worker_type", KINDS)
def test_a_pickle_in_a_worker_state_is_refused_and_never_run(
    tmp_path: Path, cls: type, worker_type: str, version: int, error: type, message: str
) -> None:
    marker = tmp_path / "pwned"
    state = _tampered(cls, worker_type, marker, version=version)
    resumed = _loader(cls, worker_type)
    with pytest.raises(error, match=message):
        resumed.load_state_dict(state)
    assert sorted(x for batch in resumed for x in batch.tolist()) == list(range(24))
    assert not marker.exists()


@pytest.mark.parametrize("cls", LOADERS)
def test_a_trusted_version_1_checkpoint_converts_and_resumes_exactly(cls: type) -> None:
    """The documented, unsafe way out for one's own old files."""
    loader = _loader(cls, "process")
    iterator = iter(loader)
    head = [next(iterator).tolist() for _ in range(3)]
    state = loader.state_dict()
    rest = [batch.tolist() for batch in iterator]
    ours = _conveyor_part(state)
    ours["version"] = 1  # as conveyor wrote it before: each worker state a pickle
    ours["workers"]["states"] = [
        None if s is None else _blob(pickle.dumps(s), cls) for s in ours["workers"]["states"]
    ]
    with pytest.raises(ValueError, match="trusted=True"):
        unpickle_legacy_checkpoint(state, trusted=False)
    converted = unpickle_legacy_checkpoint(state, trusted=True)
    resumed = _loader(cls, "process")
    resumed.load_state_dict(converted)
    assert head + [batch.tolist() for batch in resumed] == head + rest


@pytest.mark.parametrize("num_workers,worker_type", [(0, "process"), *[(2, k) for k in KINDS]])
def test_a_dataset_state_that_is_not_plain_is_a_type_error_at_save(
    num_workers: int, worker_type: str
) -> None:
    """Named at state_dict() (class, key path, type), never at resume; batches still flow."""
    dataset = CountedStream(24, extra=np.arange(3))
    loader = DataLoader(dataset, batch_size=2, num_workers=num_workers, worker_type=worker_type)
    iterator = iter(loader)
    next(iterator)
    expected = r"CountedStream.*not plain data: numpy\.ndarray at extra\.rng"
    with pytest.raises(TypeError, match=expected):
        loader.state_dict()
    assert len(list(iterator)) == 11


@pytest.mark.parametrize("num_workers,worker_type", [(0, "process"), *[(2, k) for k in KINDS]])
def test_a_datapipe_buffering_an_object_is_a_type_error_at_save_and_batches_flow(
    num_workers: int, worker_type: str
) -> None:
    """The pipe refuses its state (the object in its shuffle buffer) in the worker: the
    batch still reaches the user, and the loader's state_dict() names pipe, worker, path."""
    items = [Fraction(i, 3) for i in range(24)]
    dataset = IterableWrapper(items).shuffle(buffer_size=4).sharding_filter()
    loader = DataLoader(
        dataset, batch_size=2, num_workers=num_workers, worker_type=worker_type, collate_fn=list
    )
    iterator = iter(loader)
    head = next(iterator)
    worker = r" \(in worker \d\)" if num_workers else ""
    expected = (
        rf"of conveyor\.datapipes\.iter\.sharding\.ShardingFilter{worker} is not plain data: "
        r"fractions\.Fraction at source\.buffer\[\d\]"
    )
    with pytest.raises(TypeError, match=expected):
        loader.state_dict()
    assert sorted(head + [x for batch in iterator for x in batch]) == items


def test_a_checkpoint_holding_an_object_is_refused_before_use() -> None:
    loader = _loader(DataLoader, "thread")
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    del iterator
    state["workers"]["states"][1] = {"next": WritesFile("/nonexistent/never")}
    with pytest.raises(TypeError, match=r"WritesFile at workers\.states\[1\]\.next"):
        _loader(DataLoader, "thread").load_state_dict(state)
