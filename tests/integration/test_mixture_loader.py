"""Mixture through conveyor's DataLoader: same samples, exact resume, no silent duplication."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from test_checkpoint import check_resume_everywhere

from conveyor import DataLoader, IterableDataset, Mixture
from conveyor.datapipes.iter import IterableWrapper


class Squares(IterableDataset[str]):
    """A stream without state (resumed by reading it again)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        return (f"sq{i * i}" for i in range(self.n))


def make_mixture(stop_on: str = "first_exhausted") -> Mixture:
    sources = {
        "letters": [f"{c}{i}" for i in range(3) for c in "abcdefghij"],
        "squares": Squares(40),
        "pipe": IterableWrapper([f"p{i}" for i in range(25)]),  # a stream with state
    }
    return Mixture(sources, {"letters": 0.5, "squares": 0.3, "pipe": 0.2}, stop_on=stop_on)  # type: ignore[arg-type]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_loader_delivers_the_mixture_in_order(num_workers: int) -> None:
    expected = list(make_mixture())
    loader = DataLoader(make_mixture(), batch_size=4, num_workers=num_workers)
    assert [x for batch in loader for x in batch] == expected
    epochs = []
    for epoch in range(2):
        loader.dataset.set_epoch(epoch)  # type: ignore[attr-defined]
        epochs.append([x for batch in loader for x in batch])
    assert epochs[0] == expected
    assert len(epochs[1]) == len(expected) and epochs[1] != expected  # reshuffled


@pytest.mark.parametrize("num_workers", [0, 1])
def test_loader_checkpoint_resumes_the_mixture_anywhere(num_workers: int) -> None:
    check_resume_everywhere(
        lambda: DataLoader(make_mixture(), batch_size=3, num_workers=num_workers),
        positions=[0, 1, 5, 9] if num_workers else None,
    )


def test_several_workers_are_refused_until_the_loader_splits_positions() -> None:
    loader = DataLoader(make_mixture("never"), batch_size=4, num_workers=2)
    with pytest.raises(RuntimeError, match="num_workers > 1"):
        list(itertools.islice(loader, 3))
