"""Augmentations that resume: per-sample generators (``DataLoader(sample_seed=...)``).

A dataset that draws its augmentations from ``conveyor.sample_generators()`` gives every
sample the same draws in every run: bit for bit after a resume on another worker count
and kind, and different from one epoch to the next.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import conveyor
from conveyor import DataLoader
from conveyor.formats.skips import drain_skips

from sample_datasets import Augmented

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def _loader(num_workers: int, kind: str = "process", batch_size: int = 4) -> DataLoader[Any]:
    return DataLoader(
        Augmented(26),
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        worker_type=kind,
        sample_seed=7,
        generator=torch.Generator().manual_seed(2),
    )


def _by_index(batches: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    return {int(row[0]): row for batch in batches for row in batch}


@pytest.mark.parametrize(("num_workers", "kind"), [(0, "process"), (3, "thread"), (1, "process")])
def test_augmentations_are_bit_for_bit_after_a_resume_on_another_topology(
    num_workers: int, kind: str
) -> None:
    reference = _loader(2)
    epochs = [list(reference), list(reference)]
    loader = _loader(2)
    list(loader)  # epoch 0
    iterator = iter(loader)
    head = [next(iterator) for _ in range(3)]
    state = loader.state_dict()
    del iterator
    resumed = _loader(num_workers, kind)
    resumed.load_state_dict(state)
    rest, after = list(resumed), list(resumed)
    for got, want in zip(head + rest, epochs[1], strict=True):
        assert torch.equal(got, want)  # the same order and the same draws
    for got, want in zip(after, _continued(), strict=True):
        assert torch.equal(got, want)  # and the epoch after, too


def _continued() -> list[torch.Tensor]:
    reference = _loader(2)
    for _ in range(2):
        list(reference)
    return list(reference)


def test_each_epoch_draws_anew_and_batch_size_does_not_matter() -> None:
    loader = _loader(0, batch_size=4)
    first, second = _by_index(list(loader)), _by_index(list(loader))
    assert all(not torch.equal(first[i][1:], second[i][1:]) for i in first)
    other = _by_index(list(_loader(2, "thread", batch_size=5)))
    assert all(torch.equal(other[i], first[i]) for i in first)


def test_sample_generators_need_the_option() -> None:
    loader = DataLoader(Augmented(4), batch_size=2)
    with pytest.raises(RuntimeError, match="sample_seed"):
        next(iter(loader))


def _read(shard: list[str], offset: int) -> Any:
    for key in shard[offset:]:
        rng = conveyor.sample_generators(key)  # a stream names its samples
        yield key, float(torch.rand((), generator=rng.torch))


def test_a_stream_names_its_samples_and_resumes_them_on_another_split() -> None:
    drain_skips()  # a plain pipe run earlier in this process may have left skip records
    shards = [[f"{s}-{i}" for i in range(5)] for s in range(6)]

    def loader(num_workers: int, kind: str) -> DataLoader[Any]:
        stream = conveyor.ShardedStream(shards, _read, shuffle=True, seed=3)
        return DataLoader(
            stream,
            batch_size=3,
            num_workers=num_workers,
            worker_type=kind,
            sample_seed=11,
            collate_fn=list,
        )

    whole = dict(x for batch in loader(2, "process") for x in batch)
    first = loader(2, "process")
    iterator = iter(first)
    got = dict(x for batch in itertools.islice(iterator, 3) for x in batch)
    state = first.state_dict()
    del iterator
    resumed = loader(3, "thread")
    resumed.load_state_dict(state)
    got.update(x for batch in resumed for x in batch)
    assert got == whole  # every sample once, with the same draw
