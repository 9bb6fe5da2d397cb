"""Damaged, edited or foreign checkpoints: a clear error in the main process, at once.

Each case takes a real checkpoint, damages one field (a counter negative, huge or of the
wrong type, a list truncated, keys missing or added, an elastic progress that does not
add up, another dataset's checkpoint) and checks that ``load_state_dict()`` raises a
`TypeError` or `ValueError` naming that field: never a crash inside a worker, never a
hang (every test is bounded by the suite's timeout), never an epoch silently resumed at
the wrong place.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from conveyor import DataLoader, ShardedStream
from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import ShardWriter

from sample_datasets import Range

Damage = Callable[[dict[str, Any]], None]


def _map_loader(n: int = 40) -> DataLoader[Any]:
    return DataLoader(
        Range(n),
        batch_size=4,
        shuffle=True,
        num_workers=2,
        generator=torch.Generator().manual_seed(1),
    )


def _checkpoint(loader: DataLoader[Any], batches: int = 3) -> dict[str, Any]:
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    state = loader.state_dict()
    del iterator
    return copy.deepcopy(state)  # type: ignore[arg-type]


def _set(path: str, value: Any) -> Damage:
    def damage(state: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = state
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        if last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value

    return damage


def _delete(key: str) -> Damage:
    return lambda state: state.pop(key)


MAP_CASES: list[tuple[str, Damage, type[Exception], str]] = [
    ("negative", _set("yielded", -1), ValueError, r"yielded=-1 is out of range"),
    ("string", _set("yielded", "3"), TypeError, r"yielded is a str, expected int"),
    ("bool", _set("yielded", True), TypeError, r"yielded is a bool"),
    ("huge", _set("yielded", 10**6), ValueError, r"yielded=1000000 is more batches"),
    ("beyond 2**53", _set("yielded", 2**60), ValueError, r"yielded=.* is out of range"),
    ("samples", _set("samples", 10**5), ValueError, r"samples=100000 is more samples"),
    ("generator", _set("generator", torch.zeros(3)), ValueError, r"generator is no generator"),
    ("seed", _set("base_seed", 2**70), ValueError, r"base_seed=.* is no 64-bit seed"),
    ("ahead", _set("delivered_ahead", [1]), ValueError, r"delivered_ahead must list"),
    ("missing", _delete("yielded"), ValueError, r"lacks yielded"),
    ("extra", _set("hello", 1), ValueError, r"unknown checkpoint field\(s\) \['hello'\]"),
    ("version", _set("version", 7), ValueError, r"has version 7"),
    ("topology", _set("topology", {"world_size": 2, "rank": 5}), ValueError, r"rank=5"),
    ("not a dict", _set("fingerprint", [1]), TypeError, r"fingerprint is a list"),
]


@pytest.mark.parametrize(
    ("case", "damage", "error", "message"), MAP_CASES, ids=[c[0] for c in MAP_CASES]
)
def test_a_damaged_map_style_checkpoint_names_its_field(
    case: str, damage: Damage, error: type[Exception], message: str
) -> None:
    state = _checkpoint(_map_loader())
    damage(state)
    with pytest.raises(error, match=message):
        _map_loader().load_state_dict(state)


def test_another_datasets_checkpoint_is_refused() -> None:
    state = _checkpoint(_map_loader(40))
    with pytest.raises(ValueError, match="length=40, this loader has length=30"):
        _map_loader(30).load_state_dict(state)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root: Path = tmp_path_factory.mktemp("bad-checkpoints")
    with ShardWriter(str(root / "part-%02d.tar"), max_count=6) as writer:
        for i in range(36):
            writer.write({"__key__": f"{i:04d}", "txt": f"sample {i}"})
    return list(writer.shards)


def _tar_loader(shards: list[str], num_workers: int = 2) -> DataLoader[Any]:
    pipe = TarShards(shards, decode=None, shuffle=True, shuffle_buffer=4, seed=2)
    return DataLoader(
        pipe,
        batch_size=2,
        num_workers=num_workers,
        worker_type="thread",
        collate_fn=lambda samples: [s["__key__"] for s in samples],
    )


STREAM_CASES: list[tuple[str, Damage, type[Exception], str]] = [
    ("truncated", lambda s: s["workers"]["states"].pop(), ValueError, r"states has 1 entries"),
    ("count", _set("workers.counts.0", -1), ValueError, r"workers.counts\[0\]=-1"),
    ("counts too many", _set("workers.counts.0", 50), ValueError, r"adds up to 50 batches"),
    ("next worker", _set("workers.next_worker", 5), ValueError, r"next_worker=5 is no worker"),
    ("active", _set("workers.active", [True]), ValueError, r"active has the wrong length"),
    ("below", _set("workers.states.0.below", -3), ValueError, r"states\[0\].*below=-3"),
    ("done", _set("workers.states.0.done", [5, 2]), ValueError, r"states\[0\].*done\[1\]|sorted"),
    ("index", _set("workers.states.0.index", 10**9), ValueError, r"states\[0\].*index="),
    ("slots", _set("workers.states.0.items.slots", "!!"), ValueError, r"states\[0\].*base64"),
    ("units", _set("workers.states.0.identity.units", "6"), TypeError, r"identity.units is a str"),
]


@pytest.mark.parametrize(
    ("case", "damage", "error", "message"), STREAM_CASES, ids=[c[0] for c in STREAM_CASES]
)
def test_a_damaged_stream_checkpoint_names_its_field(
    shards: list[str], case: str, damage: Damage, error: type[Exception], message: str
) -> None:
    state = _checkpoint(_tar_loader(shards))
    assert state["workers"]["states"][0]["items"] is not None
    damage(state)
    with pytest.raises(error, match=message):
        _tar_loader(shards).load_state_dict(state)


def test_another_streams_checkpoint_is_refused_at_load(shards: list[str]) -> None:
    state = _checkpoint(_tar_loader(shards))
    with pytest.raises(ValueError, match=r"identity=.*another stream's checkpoint"):
        _tar_loader(shards[:-1]).load_state_dict(state)
    stream = ShardedStream([[1, 2], [3]], lambda shard, offset: iter(shard[offset:]))
    with pytest.raises(ValueError, match="identity="):
        DataLoader(stream, batch_size=2).load_state_dict(state)


def test_a_rejected_checkpoint_leaves_the_loader_usable(shards: list[str]) -> None:
    """The error changes nothing: the loader then reads a fresh epoch, every sample once."""
    state = _checkpoint(_tar_loader(shards))
    state["workers"]["counts"][0] = -1
    loader = _tar_loader(shards)
    with pytest.raises(ValueError):
        loader.load_state_dict(state)
    assert sorted(k for batch in loader for k in batch) == [f"{i:04d}" for i in range(36)]
