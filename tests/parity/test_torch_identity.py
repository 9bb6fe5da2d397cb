"""conveyor's classes *are* torch's classes (isinstance both ways), with every method replaced."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
import torch.utils.data as tud
import torch.utils.data.dataloader as tud_loader
import torch.utils.data.distributed as tud_distributed

import conveyor
import conveyor._utils
import conveyor.dataloader
import conveyor.distributed
import conveyor.stateful_dataloader
import conveyor.stateful_dataloader.sampler as stateful_sampler

PAIRS = [
    (conveyor.DataLoader, tud.DataLoader),
    (conveyor.Dataset, tud.Dataset),
    (conveyor.IterableDataset, tud.IterableDataset),
    (conveyor.TensorDataset, tud.TensorDataset),
    (conveyor.StackDataset, tud.StackDataset),
    (conveyor.ConcatDataset, tud.ConcatDataset),
    (conveyor.ChainDataset, tud.ChainDataset),
    (conveyor.Subset, tud.Subset),
    (conveyor.Sampler, tud.Sampler),
    (conveyor.SequentialSampler, tud.SequentialSampler),
    (conveyor.RandomSampler, tud.RandomSampler),
    (conveyor.SubsetRandomSampler, tud.SubsetRandomSampler),
    (conveyor.WeightedRandomSampler, tud.WeightedRandomSampler),
    (conveyor.BatchSampler, tud.BatchSampler),
    (conveyor.DistributedSampler, tud_distributed.DistributedSampler),
    (conveyor.DataChunk, tud.DataChunk),
    (conveyor.stateful_dataloader.StatefulDataLoader, tud.DataLoader),
    (stateful_sampler.RandomSampler, tud.RandomSampler),
    (stateful_sampler.BatchSampler, tud.BatchSampler),
    (stateful_sampler.StatefulDistributedSampler, tud_distributed.DistributedSampler),
    # the iterators (Lightning and PyG recognise them by torch's classes)
    (conveyor.dataloader._BaseDataLoaderIter, tud_loader._BaseDataLoaderIter),
    (conveyor.dataloader._SingleProcessDataLoaderIter, tud_loader._SingleProcessDataLoaderIter),
    (
        conveyor.dataloader._MultiProcessingDataLoaderIter,
        tud_loader._MultiProcessingDataLoaderIter,
    ),
]


def _torch_members(torch_cls: type) -> set[str]:
    """Every function, property or descriptor torch.utils.data defines on the class's MRO."""
    names: set[str] = set()
    for klass in torch_cls.__mro__:
        if not klass.__module__.startswith("torch.utils.data"):
            continue
        for name, value in vars(klass).items():
            if callable(value) or isinstance(value, property | staticmethod | classmethod):
                names.add(name)
    return names


def _owner(cls: type, name: str) -> type:
    return next(klass for klass in cls.__mro__ if name in vars(klass))


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_subclasses_torch(ours: type, theirs: type) -> None:
    assert issubclass(ours, theirs)


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_torch_method_is_overridden(ours: type, theirs: type) -> None:
    members = _torch_members(theirs)
    assert members, "torch's class defines nothing? the check would be vacuous"
    inherited = {
        name: _owner(ours, name).__module__
        for name in members
        if not _owner(ours, name).__module__.startswith("conveyor")
    }
    assert inherited == {}, f"{ours.__name__} still runs torch's {sorted(inherited)}"


def test_datapipes_do_not_inherit_torchs_datapipe_machinery() -> None:
    # Deliberate (README): torch's IterDataPipe metaclass would wrap every __iter__.
    assert issubclass(conveyor.IterDataPipe, tud.IterableDataset)
    assert not issubclass(conveyor.IterDataPipe, tud.IterDataPipe)
    assert type(conveyor.IterDataPipe) is not type(tud.IterDataPipe)


def test_instances_pass_torchs_isinstance_checks() -> None:
    data = conveyor.TensorDataset(torch.arange(6))
    assert isinstance(data, tud.Dataset)
    assert isinstance(data + data, tud.ConcatDataset)
    assert isinstance(conveyor.random_split(data, [3, 3])[0], tud.Subset)
    loader = conveyor.DataLoader(data, batch_size=2, shuffle=True)
    assert isinstance(loader, tud.DataLoader)
    assert isinstance(loader.sampler, tud.RandomSampler)
    assert isinstance(loader.batch_sampler, tud.BatchSampler)
    assert loader._dataset_kind == 0
    assert conveyor.DataLoader(conveyor.datapipes.iter.IterableWrapper(range(3)))._dataset_kind == 1


class _Squares(conveyor.Dataset[int]):
    def __getitem__(self, index: int) -> int:
        return index * index

    def __len__(self) -> int:
        return 10


class _Stream(conveyor.IterableDataset[int]):
    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(7))


def test_torchs_dataloader_accepts_conveyor_datasets_and_samplers() -> None:
    data = _Squares()

    def batches(loader_cls: type) -> list[list[int]]:
        sampler = conveyor.RandomSampler(data, generator=torch.Generator().manual_seed(3))
        batch_sampler = conveyor.BatchSampler(sampler, batch_size=3, drop_last=False)
        loader = loader_cls(data, batch_sampler=batch_sampler)
        return [batch.tolist() for batch in loader]

    assert batches(tud.DataLoader) == batches(conveyor.DataLoader)
    stream = [batch.tolist() for batch in tud.DataLoader(_Stream(), batch_size=3)]
    assert stream == [batch.tolist() for batch in conveyor.DataLoader(_Stream(), batch_size=3)]


def test_dataset_add_gives_conveyor_composites() -> None:
    assert type(_Squares() + _Squares()) is conveyor.ConcatDataset
    assert type(_Stream() + _Stream()) is conveyor.ChainDataset
    assert inspect.getmodule(conveyor.Dataset.__add__) is conveyor.dataset


class _Point:
    def __init__(self, x: int) -> None:
        self.x = x


def _collate_points(batch: list[_Point], *, collate_fn_map: Any = None) -> torch.Tensor:
    return torch.tensor([point.x for point in batch]) * 10


def test_types_registered_in_torchs_collate_map_are_honoured() -> None:
    import torch.utils.data._utils.collate as torch_collate

    torch_collate.default_collate_fn_map[_Point] = _collate_points
    try:
        batch = [{"p": _Point(1)}, {"p": _Point(2)}]
        assert conveyor.default_collate(batch)["p"].tolist() == [10, 20]
        assert tud.default_collate(batch)["p"].tolist() == [10, 20]
        assert (
            conveyor._utils.collate.default_collate_fn_map
            is conveyor.collate.default_collate_fn_map
        )
    finally:
        del torch_collate.default_collate_fn_map[_Point]
    with pytest.raises(TypeError):
        conveyor.default_collate([_Point(1)])


def test_private_paths_frameworks_reach_into() -> None:
    import os

    import conveyor.dataloader
    from conveyor.datapipes.iter.combinatorics import ShufflerIterDataPipe

    assert conveyor.dataloader.os is os  # tests patch conveyor.dataloader.os.cpu_count
    assert conveyor._utils.MP_STATUS_CHECK_INTERVAL == 5.0
    shuffler = conveyor.datapipes.iter.IterableWrapper(range(3)).shuffle()
    assert isinstance(shuffler, ShufflerIterDataPipe)
    assert shuffler._shuffle_enabled is True
    shuffler._shuffle_enabled = False  # accelerate's dispatcher reads and sets it
    assert list(shuffler) == [0, 1, 2]
    assert conveyor.dataloader._DatasetKind.Iterable == tud.dataloader._DatasetKind.Iterable


def test_the_readme_names_exactly_the_exports_that_do_not_subclass_torchs() -> None:
    """The README's claim "every class torch.utils.data exports has a conveyor counterpart
    that subclasses it", with its list of exceptions, checked against the packages."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    listed = re.search(r"<!-- not-subclassed -->(.*?)<!-- /not-subclassed -->", readme, re.S)
    assert listed is not None
    claimed = set(re.findall(r"`(\w+)`", listed.group(1)))
    actual = set()
    for name in tud.__all__:
        theirs = getattr(tud, name)
        if not inspect.isclass(theirs):
            continue
        ours = getattr(conveyor, name)
        if not (inspect.isclass(ours) and issubclass(ours, theirs)):
            actual.add(name)
    assert claimed == actual
