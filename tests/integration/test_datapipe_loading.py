"""DataLoader running DataPipe graphs: sharding across workers, shuffling per epoch."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.utils.data as tud
from torch.utils.data.datapipes.iter import IterableWrapper as TorchWrapper

from conveyor import DataLoader
from conveyor.datapipes.iter import GreedyJoiner, IterableWrapper
from sample_pipes import is_even, plus_hundred, times_ten

KINDS = ["process", "thread"]


def _flat(batches: list[Any]) -> list[int]:
    return [int(x) for b in batches for x in (b if isinstance(b, torch.Tensor) else [b])]


@pytest.mark.parametrize("num_workers", [0, 1, 2])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_sharded_graph_matches_torch(num_workers: int, batch_size: int | None) -> None:
    """Same graph, same loader arguments: same batches in the same order as torch."""
    ours_dp = IterableWrapper(range(25)).sharding_filter().map(times_ten).filter(is_even)
    theirs_dp = TorchWrapper(range(25)).sharding_filter().map(times_ten).filter(is_even)
    ours = [
        b if batch_size is None else b.tolist()
        for b in DataLoader(ours_dp, batch_size=batch_size, num_workers=num_workers)
    ]
    theirs = [
        b if batch_size is None else b.tolist()
        for b in tud.DataLoader(theirs_dp, batch_size=batch_size, num_workers=num_workers)
    ]
    assert [int(x) if not isinstance(x, list) else x for x in ours] == [
        int(x) if not isinstance(x, list) else x for x in theirs
    ]


@pytest.mark.parametrize("worker_type", KINDS)
@pytest.mark.parametrize("persistent", [False, True])
def test_shuffled_graph_every_item_once_and_epochs_differ(
    worker_type: str, persistent: bool
) -> None:
    dp = IterableWrapper(range(40)).shuffle(buffer_size=100).sharding_filter()
    loader = DataLoader(
        dp,
        batch_size=4,
        shuffle=True,
        num_workers=2,
        worker_type=worker_type,
        persistent_workers=persistent,
        generator=torch.Generator().manual_seed(3),
    )
    epochs = [_flat(list(loader)) for _ in range(3)]
    for epoch in epochs:
        assert sorted(epoch) == list(range(40))
    assert epochs[0] != epochs[1] != epochs[2]
    # the same seed reproduces the same epochs
    again = DataLoader(
        IterableWrapper(range(40)).shuffle(buffer_size=100).sharding_filter(),
        batch_size=4,
        shuffle=True,
        num_workers=2,
        worker_type=worker_type,
        persistent_workers=persistent,
        generator=torch.Generator().manual_seed(3),
    )
    assert [_flat(list(again)) for _ in range(3)] == epochs


def test_shuffle_false_turns_shuffling_off() -> None:
    dp = IterableWrapper(range(10)).shuffle().sharding_filter()
    assert _flat(list(DataLoader(dp, batch_size=None, shuffle=False))) == list(range(10))


def test_shuffled_order_does_not_depend_on_worker_count() -> None:
    """Shuffle before sharding: the multiset per epoch and the global order are seed-fixed."""
    orders = []
    for num_workers in (0, 1, 2):
        dp = IterableWrapper(range(30)).shuffle(buffer_size=100).sharding_filter()
        loader = DataLoader(
            dp,
            batch_size=None,
            shuffle=True,
            num_workers=num_workers,
            generator=torch.Generator().manual_seed(9),
        )
        orders.append(sorted(_flat(list(loader))))
    assert orders[0] == orders[1] == orders[2] == list(range(30))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_rfc_users_example_through_the_loader(num_workers: int) -> None:
    """A source forked three ways, two copies mapped, greedily joined (RFC #49440)."""
    dp1, dp2, dp3 = IterableWrapper(range(12)).fork(3)
    joined = GreedyJoiner(dp1, dp2.map(times_ten), dp3.map(plus_hundred)).sharding_filter()
    inline = sorted(joined)
    assert inline == sorted([*range(12), *(x * 10 for x in range(12)), *range(100, 112)])
    loaded = list(DataLoader(joined, batch_size=None, num_workers=num_workers))
    assert sorted(_flat(loaded)) == inline


def test_unsharded_graph_with_workers_warns_once() -> None:
    loader = DataLoader(IterableWrapper(range(4)), batch_size=None, num_workers=2)
    with pytest.warns(UserWarning, match="no sharding node"):
        first = [int(x) for x in loader]  # (list() would call len() and warn about it too)
    assert sorted(first) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert sorted(int(x) for x in loader) == sorted(first)  # warned once only


def test_cuda_initialised_before_fork_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    from sample_datasets import Range

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.warns(UserWarning, match="Cannot re-initialize CUDA in forked subprocess"):
        list(DataLoader(Range(2), num_workers=1, multiprocessing_context="fork"))
