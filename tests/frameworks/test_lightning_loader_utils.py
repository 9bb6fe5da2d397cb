"""Lightning's own loader utilities, unmodified, on conveyor loaders and on torch's alike.

Lightning re-creates a user's DataLoader subclass to inject its DistributedSampler
(``_update_dataloader``: ``vars(loader)``, the ``__init__`` signature, and the attribute
assignments and deletions ``_replace_dunder_methods`` recorded), and its CombinedLoader
pickles itself mid-epoch, leaving out the loaders' live iterators. Each case runs with
conveyor's loader and with torch's; the outcomes must be the same.
"""

from __future__ import annotations

import contextlib
import pickle
from typing import Any

import pytest

pytest.importorskip("lightning", reason="the frameworks extra")
pytestmark = [pytest.mark.frameworks, pytest.mark.timeout(120)]

import torch.utils.data as tud  # noqa: E402
from lightning.fabric.utilities.data import (  # noqa: E402
    _replace_dunder_methods,
    _update_dataloader,
)
from lightning.pytorch.utilities.combined_loader import CombinedLoader  # noqa: E402

import conveyor  # noqa: E402

BASES = [conveyor.DataLoader, tud.DataLoader]


def _batches(loader: Any) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


@pytest.mark.parametrize("base", BASES, ids=lambda b: b.__module__)
def test_recorded_assignments_and_deletions_survive_reinstantiation(base: type) -> None:
    class Loader(base):  # type: ignore[misc, valid-type]
        def __setattr__(self, name: str, value: Any) -> None:
            super().__setattr__(name, value + 2 if name == "custom" else value)

    with _replace_dunder_methods(base, "dataset"):
        loader = Loader(range(10))
        loader.custom = 5
        del loader.dataset  # conveyor's attribute could not be deleted before
        with contextlib.suppress(AttributeError):
            del loader.never_set
    rebuilt = _update_dataloader(loader, loader.sampler)
    assert rebuilt.custom == 7
    assert not hasattr(rebuilt, "dataset")
    assert type(rebuilt) is Loader


class _Renamed(conveyor.DataLoader[Any]):
    def __init__(self, data: Any, *args: Any, **kwargs: Any) -> None:
        self.data = data  # the dataset under another name
        super().__init__(data, *args, **kwargs)


class _TorchRenamed(tud.DataLoader[Any]):
    def __init__(self, data: Any, *args: Any, **kwargs: Any) -> None:
        self.data = data
        super().__init__(data, *args, **kwargs)


class _PrivateOptions(conveyor.DataLoader[Any]):
    """PopTorch-style: the subclass keeps its own ``_options``."""

    def __init__(self, dataset: Any, batch_size: int = 1, **kwargs: Any) -> None:
        self._options = {"mode": "theirs"}
        super().__init__(dataset, batch_size=batch_size, **kwargs)


class _TorchPrivateOptions(tud.DataLoader[Any]):
    def __init__(self, dataset: Any, batch_size: int = 1, **kwargs: Any) -> None:
        self._options = {"mode": "theirs"}
        super().__init__(dataset, batch_size=batch_size, **kwargs)


@pytest.mark.parametrize(
    ("ours", "theirs"), [(_Renamed, _TorchRenamed), (_PrivateOptions, _TorchPrivateOptions)]
)
def test_injected_distributed_sampler_as_with_torch(ours: type, theirs: type) -> None:
    outcomes = []
    for cls in (ours, theirs):
        with _replace_dunder_methods(cls.__mro__[1], "dataset"):
            loader = cls(list(range(10)), batch_size=3, shuffle=True)
        sampler = tud.DistributedSampler(list(range(10)), num_replicas=2, rank=0, shuffle=False)
        rebuilt = _update_dataloader(loader, sampler)
        assert type(rebuilt) is cls
        # Lightning recognises torch's default batch sampler by its exact type; conveyor's
        # (a subclass) takes its path for custom batch samplers, which rebuilds it around
        # the injected sampler: the same batches (README: deliberate differences)
        injected = rebuilt.sampler if cls is theirs else rebuilt.batch_sampler.sampler
        assert injected is sampler
        outcomes.append(_batches(rebuilt))
    assert outcomes[0] == outcomes[1] == [[0, 2, 4], [6, 8]]


@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")  # Lightning 2.6 on torch 2.13
@pytest.mark.parametrize("base", BASES, ids=lambda b: b.__module__)
def test_combined_loader_pickles_without_the_live_iterator(base: type) -> None:
    loader = base([0, 1, 2, 3])
    combined = CombinedLoader([loader, list(range(10))])
    iter(combined)
    state = combined._iterator.__getstate__()
    assert state["iterators"][0] is None  # the loader's iterator is left out, as torch's
    copy = pickle.loads(pickle.dumps(combined))
    assert copy.flattened[0].dataset == [0, 1, 2, 3]
