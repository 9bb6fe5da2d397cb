"""The drop-in surface: torch's public names, module paths and DataLoader signature."""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch.utils.data as tud

import conveyor

# Every name torch exports exists here (the DataPipe typing and determinism decorators and
# DFIterDataPipe included, with torch's semantics).
NOT_PROVIDED: set[str] = set()


@pytest.mark.parametrize("name", sorted(set(tud.__all__) - NOT_PROVIDED))
def test_every_public_torch_name_exists(name: str) -> None:
    assert hasattr(conveyor, name), name
    assert name in conveyor.__all__


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("sampler", "BatchSampler"),
        ("sampler", "RandomSampler"),
        ("dataset", "Subset"),
        ("dataset", "random_split"),
        ("dataloader", "DataLoader"),
        ("dataloader", "default_collate"),
        ("dataloader", "get_worker_info"),
        ("distributed", "DistributedSampler"),
        ("graph", "traverse_dps"),
        ("graph_settings", "apply_sharding"),
        ("datapipes.iter", "IterableWrapper"),
        ("datapipes.map", "SequenceWrapper"),
    ],
)
def test_torch_module_paths_work(module: str, name: str) -> None:
    theirs = importlib.import_module(f"torch.utils.data.{module}")
    ours = importlib.import_module(f"conveyor.{module}")
    assert hasattr(theirs, name)
    assert hasattr(ours, name)


def test_dataloader_signature_is_torch_s_plus_extras() -> None:
    theirs = inspect.signature(tud.DataLoader.__init__).parameters
    ours = inspect.signature(conveyor.DataLoader.__init__).parameters
    for name, parameter in theirs.items():
        assert name in ours, name
        assert ours[name].kind == parameter.kind, name
        assert ours[name].default == parameter.default, name
    assert list(ours)[: len(theirs)] == list(theirs)  # same order; extras come after


def test_stateful_dataloader_signature_is_torchdata_s_plus_extras() -> None:
    """Frameworks check the keyword arguments they pass on against this signature
    (torchtitan's ParallelAwareDataloader): it must name them as torchdata's does."""
    from torchdata.stateful_dataloader import StatefulDataLoader as Theirs

    from conveyor.stateful_dataloader import StatefulDataLoader

    theirs = inspect.signature(Theirs.__init__).parameters
    ours = inspect.signature(StatefulDataLoader.__init__).parameters
    for name, parameter in theirs.items():
        assert name in ours, name
        assert ours[name].kind == parameter.kind, name
        if name != "snapshot_every_n_steps":  # 1 here: every step is exact anyway
            assert ours[name].default == parameter.default, name
