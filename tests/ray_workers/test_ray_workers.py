"""worker_type="ray": the semantics of process workers, checked against process workers and
torch.utils.data on the same input, on a real 2-node local Ray cluster (see conftest.py)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import ray
import torch
import torch.utils.data as tud

import conveyor

from sample_datasets import BlockAt, FailAt, RandomDraws, Range, ShardedStream, WorkerStamp
from torch_oracle import drain, torch_batches

pytestmark = [pytest.mark.ray, pytest.mark.leaks_owned_by("ray_cluster")]
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

# The actors ask for no CPU, so that several fit on the two 1-CPU nodes of the test cluster.
RAY = {"worker_type": "ray", "ray_remote_args": {"num_cpus": 0}}


def _loader(kind: str, dataset: Any, **kwargs: Any) -> Any:
    if kind == "torch":
        return tud.DataLoader(dataset, **kwargs)
    extra = RAY if kind == "ray" else {"worker_type": kind}
    return conveyor.DataLoader(dataset, **kwargs, **extra)


def _epoch(kind: str, dataset: Any, seed: int = 7, **kwargs: Any) -> list[Any]:
    generator = torch.Generator().manual_seed(seed)
    return drain(_loader(kind, dataset, generator=generator, **kwargs))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def test_sampler_order_and_values_match_process_workers_and_torch(ray_cluster: Any) -> None:
    options = {"batch_size": 4, "shuffle": True, "num_workers": 2}
    expected = _epoch("torch", Range(23), **options)
    assert _same(_epoch("process", Range(23), **options), expected)
    assert _same(_epoch("ray", Range(23), **options), expected)


def test_seeds_match_process_workers_and_torch(ray_cluster: Any) -> None:
    """random, torch and NumPy in each actor are seeded base_seed + worker_id, as torch does."""
    options = {"batch_size": 2, "num_workers": 2}
    expected = _epoch("torch", RandomDraws(8), **options)
    assert _same(_epoch("ray", RandomDraws(8), **options), expected)


def _record_init(worker_id: int) -> None:
    info = conveyor.get_worker_info()
    assert info is not None and info.id == worker_id
    info.dataset.initialised_by = worker_id  # type: ignore[attr-defined]


class InitSeen(Range):
    initialised_by = -1

    def __getitem__(self, i: int) -> int:  # type: ignore[override]
        return self.initialised_by


def test_worker_init_fn_and_get_worker_info(ray_cluster: Any) -> None:
    options = {"batch_size": 3, "num_workers": 2, "worker_init_fn": _record_init}
    batches = _epoch("ray", InitSeen(12), **options)
    assert [b.tolist() for b in batches] == [[0] * 3, [1] * 3, [0] * 3, [1] * 3]
    stamps = _epoch("ray", WorkerStamp(8, conveyor.get_worker_info), batch_size=2, num_workers=2)
    reference = _epoch(
        "process", WorkerStamp(8, conveyor.get_worker_info), batch_size=2, num_workers=2
    )
    for ours, theirs in zip(stamps, reference, strict=True):
        for key in ("index", "worker", "num_workers", "seed"):
            assert ours[key].tolist() == theirs[key].tolist(), key
    assert {b["pid"][0].item() for b in stamps}.isdisjoint({b["pid"][0].item() for b in reference})


def test_iterable_dataset_replicas_match_torch(ray_cluster: Any) -> None:
    options = {"batch_size": 3, "num_workers": 2}
    expected = torch_batches(ShardedStream(0, 17, uneven=True), **options)
    ours = list(_loader("ray", ShardedStream(0, 17, uneven=True), **options))
    assert _same(ours, expected)


def test_persistent_workers_reuse_their_actors(ray_cluster: Any) -> None:
    loader = _loader(
        "ray",
        WorkerStamp(8, conveyor.get_worker_info),
        batch_size=2,
        num_workers=2,
        persistent_workers=True,
    )
    epochs = [list(loader) for _ in range(2)]
    pids = [sorted({b["pid"][0].item() for b in epoch}) for epoch in epochs]
    assert pids[0] == pids[1] and len(pids[0]) == 2
    assert [b["index"].tolist() for b in epochs[0]] == [b["index"].tolist() for b in epochs[1]]
    loader._iterator.close()


def test_exception_arrives_with_type_and_remote_traceback(ray_cluster: Any) -> None:
    with pytest.raises(KeyError) as caught:
        list(_loader("ray", FailAt(10, 5, KeyError), batch_size=2, num_workers=2))
    text = str(caught.value)
    assert "Caught KeyError in DataLoader worker ray" in text
    assert "bad sample 5" in text and "__getitem__" in text  # the actor's traceback


def test_timeout_raises_and_ends_the_actors(ray_cluster: Any) -> None:
    loader = _loader("ray", BlockAt(8, 3), batch_size=1, num_workers=2, timeout=1.5)
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 1.5 seconds"):
        list(loader)


def test_in_order_false_delivers_every_batch(ray_cluster: Any) -> None:
    batches = list(_loader("ray", Range(30), batch_size=4, num_workers=3, in_order=False))
    assert sorted(i for b in batches for i in b.tolist()) == list(range(30))


def test_state_dict_resume_continues_where_it_stopped(ray_cluster: Any) -> None:
    options = {"batch_size": 3, "shuffle": True, "num_workers": 2}
    whole = _epoch("torch", Range(20), **options)
    loader = _loader("ray", Range(20), generator=torch.Generator().manual_seed(7), **options)
    iterator = iter(loader)
    head = [next(iterator) for _ in range(3)]
    state = loader.state_dict()
    del iterator
    generator = torch.Generator().manual_seed(7)
    resumed = _loader("process", Range(20), generator=generator, **options)  # another kind
    resumed.load_state_dict(state)
    assert _same(head + list(resumed), whole)


def test_tensor_batches_view_the_object_store(ray_cluster: Any) -> None:
    """A tensor batch arrives as a view of Ray's buffer (no copy), and stays usable."""

    class Images(Range):
        def __getitem__(self, i: int) -> torch.Tensor:  # type: ignore[override]
            return torch.full((3, 8, 8), i, dtype=torch.uint8)

    loader = _loader("ray", Images(6), batch_size=3, num_workers=2)
    batches = list(loader)
    assert [b[:, 0, 0, 0].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5]]
    batches[0] += 1  # writable, like a slab view
    assert batches[0][:, 0, 0, 0].tolist() == [1, 2, 3]


def test_datapipe_sharding_across_actors_matches_process_workers(ray_cluster: Any) -> None:
    from conveyor.datapipes.iter import IterableWrapper

    def graph() -> Any:
        return IterableWrapper(range(22)).shuffle().sharding_filter().map(_double)

    options = {"batch_size": 4, "num_workers": 2}
    ours = [b.tolist() for b in _epoch("ray", graph(), **options)]
    reference = [b.tolist() for b in _epoch("process", graph(), **options)]
    assert ours == reference
    assert sorted(i for b in ours for i in b) == [2 * i for i in range(22)]


def _double(x: int) -> int:
    return 2 * x


def test_stats_count_each_actors_busy_time_and_bytes(ray_cluster: Any) -> None:
    class Images(Range):
        def __getitem__(self, i: int) -> torch.Tensor:  # type: ignore[override]
            return torch.zeros((3, 16, 16), dtype=torch.uint8)

    loader = _loader("ray", Images(8), batch_size=2, num_workers=2)
    assert len(list(loader)) == 4
    stats = loader.stats()
    assert stats.batches == 4 and stats.samples == 8
    assert sorted(w.worker_id for w in stats.workers) == [0, 1]
    assert all(w.batches == 2 and w.busy_s > 0 for w in stats.workers)
    assert stats.bytes_moved == 4 * 2 * 3 * 16 * 16  # every batch, through the object store
