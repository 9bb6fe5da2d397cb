"""Hugging Face datasets, unmodified, through conveyor loaders: every sample exactly once.

HF iterable datasets split their shards between DataLoader workers with
``torch.utils.data.get_worker_info()``: conveyor's process and thread workers must both
answer it, or every worker reads every shard (silent duplication).
"""

from __future__ import annotations

from typing import Any

import pytest

datasets = pytest.importorskip("datasets", reason="the frameworks extra")
pytestmark = [pytest.mark.frameworks, pytest.mark.timeout(120)]

import conveyor  # noqa: E402

datasets.disable_progress_bars()
tqdm = pytest.importorskip("tqdm")
tqdm.tqdm.monitor_interval = 0  # no monitor thread (it would outlive each test)

KINDS = [(0, "process"), (2, "process"), (2, "thread")]


def table(n: int = 64) -> Any:
    return datasets.Dataset.from_dict({"x": list(range(n)), "y": [i * 10 for i in range(n)]})


@pytest.mark.parametrize(("num_workers", "worker_type"), KINDS)
def test_map_style_with_torch_format(num_workers: int, worker_type: str) -> None:
    data = table().with_format("torch")
    loader = conveyor.DataLoader(
        data, batch_size=8, shuffle=True, num_workers=num_workers, worker_type=worker_type
    )
    xs: list[int] = []
    for batch in loader:
        assert batch["x"].dtype.is_floating_point is False
        assert (batch["y"] == batch["x"] * 10).all()
        xs += batch["x"].tolist()
    assert sorted(xs) == list(range(64))


@pytest.mark.parametrize(("num_workers", "worker_type"), KINDS)
def test_iterable_shards_are_split_between_workers(num_workers: int, worker_type: str) -> None:
    stream = table().to_iterable_dataset(num_shards=4).with_format("torch")
    loader = conveyor.DataLoader(
        stream, batch_size=4, num_workers=num_workers, worker_type=worker_type
    )
    xs = [x for batch in loader for x in batch["x"].tolist()]
    assert sorted(xs) == list(range(64))  # 64 samples, not 64 x num_workers


def test_split_by_node_and_workers_deliver_each_sample_once() -> None:
    from datasets.distributed import split_dataset_by_node

    seen: list[int] = []
    for rank in range(2):
        stream = table().to_iterable_dataset(num_shards=4)
        part = split_dataset_by_node(stream, rank=rank, world_size=2).with_format("torch")
        loader = conveyor.DataLoader(part, batch_size=4, num_workers=2)
        seen += [x for batch in loader for x in batch["x"].tolist()]
    assert sorted(seen) == list(range(64))
