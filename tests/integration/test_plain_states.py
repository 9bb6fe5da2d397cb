"""Every state conveyor produces is plain data: no bytes, no objects, no pickle inside.

Each loader below (map-style, streams with and without state, DataPipe graphs, shuffled
`TarShards`, `ShardedStream`, `Mixture`, torchdata's drop-in with its stateful samplers)
is checkpointed at several batches, mid-epoch, between epochs and after a ``break``; each
state is walked (only dicts, lists, tuples, str, int, float, bool, None and tensors),
round-tripped through ``torch.save`` / ``torch.load(weights_only=True)`` and resumed in a
fresh loader, whose rest of the run must be the uninterrupted run's.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from conveyor import DataLoader, Mixture, ShardedStream
from conveyor.datapipes.iter import Concater, IterableWrapper
from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import ShardWriter
from conveyor.state.plain import check_plain
from conveyor.stateful_dataloader import StatefulDataLoader

from sample_datasets import CountedStream, Range

TOPOLOGIES = [(0, "process"), (2, "process"), (2, "thread")]


def _walk_no_bytes(value: Any, path: str = "") -> None:
    """No bytes anywhere (a pickle needs bytes), and plain data throughout."""
    check_plain(value)
    if isinstance(value, bytes | bytearray):
        raise AssertionError(f"bytes at {path}")
    if isinstance(value, dict):
        for key, item in value.items():
            _walk_no_bytes(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _walk_no_bytes(item, f"{path}[{index}]")


def _weights_only(state: Any) -> Any:
    _walk_no_bytes(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _norm(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.tolist()
    if isinstance(batch, dict):
        return {k: _norm(v) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return [_norm(x) for x in batch]
    return batch


def check_plain_resume(make: Callable[[], Any], positions: list[int]) -> None:
    """Epoch 0 whole, then epoch 1 interrupted at each of ``positions`` (and -1: after it
    ended, and after a ``break``): the resumed rest equals the uninterrupted run's."""
    reference = make()
    epochs = [[_norm(b) for b in reference] for _ in range(2)]
    for k in positions:
        loader = make()
        list(loader)
        iterator = iter(loader)
        head = [_norm(next(iterator)) for _ in range(k)]
        state = _weights_only(loader.state_dict())
        del iterator  # a break: the loader keeps where the loop was left
        assert _walk_no_bytes(loader.state_dict()) is None
        resumed = make()
        resumed.load_state_dict(state)
        assert head + [_norm(b) for b in resumed] == epochs[1], f"resume at batch {k}"
    loader = make()
    list(loader)
    between = _weights_only(loader.state_dict())  # between epochs
    resumed = make()
    resumed.load_state_dict(between)
    assert [_norm(b) for b in resumed] == epochs[1], "resume between epochs"


def _tar_shards(root: Path, shards: int = 4, per_shard: int = 6) -> list[str]:
    with ShardWriter(str(root / "part-%03d.tar"), max_count=per_shard) as writer:
        for i in range(shards * per_shard):
            writer.write({"__key__": f"{i:06d}", "cls": i, "txt": f"sample {i}"})
    return list(writer.shards)


def _read_list(shard: list[int], offset: int) -> Any:
    return iter(shard[offset:])


MAKERS: dict[str, Callable[[int, str, Path], Any]] = {
    "map-shuffled": lambda n, kind, _: DataLoader(
        Range(14),
        batch_size=3,
        shuffle=True,
        num_workers=n,
        worker_type=kind,
        generator=torch.Generator().manual_seed(3),
    ),
    "stream-with-state": lambda n, kind, _: DataLoader(
        CountedStream(14), batch_size=2, num_workers=n, worker_type=kind
    ),
    "datapipe-shuffled": lambda n, kind, _: DataLoader(
        IterableWrapper(range(14)).shuffle(buffer_size=5).sharding_filter(),
        batch_size=2,
        shuffle=True,
        num_workers=n,
        worker_type=kind,
        generator=torch.Generator().manual_seed(4),
    ),
    "datapipe-batches-shuffled-forked": lambda n, kind, _: DataLoader(  # DataChunks buffered
        Concater(
            *IterableWrapper(range(14)).batch(2).shuffle(buffer_size=3).fork(2)
        ).sharding_filter(),
        batch_size=2,
        num_workers=n,
        worker_type=kind,
        generator=torch.Generator().manual_seed(6),
    ),
    "tar-shards-shuffled": lambda n, kind, root: DataLoader(
        TarShards(_tar_shards(root), shuffle=True, shuffle_buffer=5, seed=5),
        batch_size=2,
        num_workers=n,
        worker_type=kind,
        generator=torch.Generator().manual_seed(5),
    ),
    "sharded-stream": lambda n, kind, _: DataLoader(
        ShardedStream([list(range(i, i + 4)) for i in range(0, 16, 4)], _read_list, shuffle=True),
        batch_size=2,
        num_workers=n,
        worker_type=kind,
    ),
    "mixture": lambda n, kind, _: DataLoader(
        Mixture(
            {"a": list(range(10)), "b": IterableWrapper(range(100, 108))}, {"a": 0.6, "b": 0.4}
        ),
        batch_size=2,
        num_workers=n,
        worker_type=kind,
    ),
    "stateful-dataloader": lambda n, kind, _: StatefulDataLoader(
        Range(14),
        batch_size=3,
        shuffle=True,
        num_workers=n,
        worker_type=kind,
    ),
}


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(("num_workers", "worker_type"), TOPOLOGIES)
@pytest.mark.parametrize("name", sorted(MAKERS))
def test_every_state_is_plain_and_resumes_after_a_weights_only_load(
    tmp_path: Path, name: str, num_workers: int, worker_type: str
) -> None:
    make = MAKERS[name]
    if name == "stateful-dataloader":
        torch.manual_seed(11)  # its RandomSampler seeds itself once from the global RNG

        def build() -> Any:
            torch.manual_seed(11)
            return make(num_workers, worker_type, tmp_path)

        check_plain_resume(build, [0, 1, 3])
        return
    check_plain_resume(lambda: make(num_workers, worker_type, tmp_path), [0, 1, 3])


def test_a_full_ten_thousand_sample_shuffle_buffer_checkpoints_in_64_kb(tmp_path: Path) -> None:
    """Positions, not samples: the state's size does not grow with the samples' size."""
    with ShardWriter(str(tmp_path / "part-%03d.tar"), max_count=1300) as writer:
        for i in range(10_400):
            writer.write({"__key__": f"{i:06d}", "bin": bytes(600), "cls": i})
    pipe = TarShards(list(writer.shards), decode=None, shuffle=True, shuffle_buffer=10_000)
    iterator = iter(pipe)
    for _ in range(10_100):
        next(iterator)
    state = pipe.state_dict()
    saved = io.BytesIO()
    torch.save(state, saved)
    assert len(saved.getvalue()) <= 64 * 1024  # the buffer's samples alone are 6 MB
    resumed = TarShards(list(writer.shards), decode=None, shuffle=True, shuffle_buffer=10_000)
    resumed.load_state_dict(_weights_only(state))
    assert [s["__key__"] for s in resumed] == [s["__key__"] for s in iterator]
