"""Checkpoints that meet a changed loader: honoured exactly (batch size), or refused.

Each case is a row of the "nothing lost silently" table: a resume that used to skip or
repeat samples without a word. Resume after a batch-size change is compared with the
uninterrupted run (the same order, every sample once) and with torchdata's
StatefulDataLoader, which resumes this case exactly too.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conveyor import DataLoader, IterableDataset
from conveyor.distributed import DistributedSampler

from sample_datasets import Range


def _loader(n: int = 100, batch_size: int | None = 8, **kwargs: Any) -> DataLoader[Any]:
    kwargs.setdefault("shuffle", True)
    kwargs.setdefault("generator", torch.Generator().manual_seed(3))
    return DataLoader(Range(n), batch_size=batch_size, **kwargs)


def _samples(batches: Any) -> list[int]:
    return [int(x) for batch in batches for x in torch.as_tensor(batch).reshape(-1)]


def _checkpoint(loader: DataLoader[Any], batches: int) -> tuple[list[int], Any]:
    it = iter(loader)
    got = _samples(next(it) for _ in range(batches))
    state = loader.state_dict()
    del it
    return got, state


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(("old", "new", "taken"), [(8, 4, 3), (8, 16, 5), (8, 3, 12), (4, 8, 7)])
def test_resume_with_another_batch_size_is_exact(
    old: int, new: int, taken: int, num_workers: int
) -> None:
    uninterrupted = _samples(_loader(batch_size=old))
    got, state = _checkpoint(_loader(batch_size=old, num_workers=num_workers), taken)
    assert state["samples"] == old * taken
    resumed = _loader(batch_size=new, num_workers=num_workers, generator=torch.Generator())
    resumed.load_state_dict(state)
    batches = [b.tolist() for b in resumed]
    assert got + _samples(batches) == uninterrupted  # same order, every sample once
    assert all(len(b) == new for b in batches[:-1])


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
def test_resume_with_another_batch_size_matches_torchdata() -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    theirs = StatefulDataLoader(list(range(100)), batch_size=8, shuffle=True)
    it = iter(theirs)
    their_first = _samples(next(it) for _ in range(3))
    their_state = theirs.state_dict()
    del it
    their_resumed = StatefulDataLoader(list(range(100)), batch_size=4, shuffle=True)
    their_resumed.load_state_dict(their_state)
    their_rest = _samples(their_resumed)
    ours_first, state = _checkpoint(_loader(batch_size=8), 3)
    resumed = _loader(batch_size=4, generator=torch.Generator())
    resumed.load_state_dict(state)
    ours_rest = _samples(resumed)
    # both deliver each sample once, and both go on with 76 samples in batches of 4
    for first, rest in ((their_first, their_rest), (ours_first, ours_rest)):
        assert len(first) == 24 and sorted(first + rest) == list(range(100))


def test_a_rebatched_epoch_resumes_again() -> None:
    uninterrupted = _samples(_loader(batch_size=8))
    got, state = _checkpoint(_loader(batch_size=8), 3)
    second = _loader(batch_size=4, generator=torch.Generator())
    second.load_state_dict(state)
    more, state = _checkpoint(second, 5)
    assert state["samples"] == 24 + 20 and state["rebatched"]
    third = _loader(batch_size=4, generator=torch.Generator())
    third.load_state_dict(state)
    assert got + more + _samples(third) == uninterrupted


def test_distributed_ranks_resume_with_another_batch_size() -> None:
    def rank_loader(rank: int, batch_size: int) -> DataLoader[Any]:
        sampler = DistributedSampler(Range(100), num_replicas=2, rank=rank, seed=5)
        return DataLoader(Range(100), batch_size=batch_size, sampler=sampler)

    seen: list[int] = []
    states = []
    for rank in range(2):
        got, state = _checkpoint(rank_loader(rank, 4), 3)
        seen += got
        states.append(state)
    for rank in range(2):
        resumed = rank_loader(rank, 2)
        resumed.load_state_dict(states[rank])
        seen += _samples(resumed)
    assert sorted(seen) == list(range(100))


@pytest.mark.parametrize("length", [30, 200])
def test_another_dataset_length_is_refused(length: int) -> None:
    _, state = _checkpoint(_loader(), 3)
    with pytest.raises(ValueError, match=rf"length=100, this loader has length={length}"):
        _loader(n=length).load_state_dict(state)


def test_another_sampler_is_refused() -> None:
    _, state = _checkpoint(_loader(), 3)
    with pytest.raises(ValueError, match=r"sampler=.*RandomSampler.*SequentialSampler"):
        _loader(shuffle=False).load_state_dict(state)


def test_a_generator_mismatch_is_refused() -> None:
    _, state = _checkpoint(_loader(), 3)
    with pytest.raises(ValueError, match="with a generator"):
        _loader(generator=None).load_state_dict(state)


def test_none_and_partial_dicts_get_a_clear_error() -> None:
    _, state = _checkpoint(_loader(), 3)
    with pytest.raises(TypeError, match=r"expects the dict that DataLoader\.state_dict"):
        _loader().load_state_dict(None)  # type: ignore[arg-type]
    half = {key: value for index, (key, value) in enumerate(state.items()) if index % 2}
    half["in_epoch"] = True
    with pytest.raises(ValueError, match=r"incomplete|version"):
        _loader().load_state_dict(half)  # type: ignore[arg-type]
    foreign = {"step": 3, "epoch": 0}
    with pytest.raises(ValueError, match="different library"):
        _loader().load_state_dict(foreign)  # type: ignore[arg-type]


def test_out_of_order_deliveries_cannot_change_batch_size() -> None:
    _, state = _checkpoint(_loader(), 3)
    state["delivered_ahead"] = [4]  # batch 4 came before batch 3 (in_order=False)
    resumed = _loader(batch_size=4, generator=torch.Generator())
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match="in_order=False"):
        iter(resumed)


class _Stateless(IterableDataset[int]):
    def __iter__(self) -> Any:
        return iter(range(40))


def test_a_stream_without_state_cannot_change_batch_size() -> None:
    loader = DataLoader(_Stateless(), batch_size=8)
    _, state = _checkpoint(loader, 2)
    resumed = DataLoader(_Stateless(), batch_size=4)
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match="no state_dict"):
        iter(resumed)
    same = DataLoader(_Stateless(), batch_size=8)
    same.load_state_dict(state)
    assert _samples(same) == list(range(16, 40))
