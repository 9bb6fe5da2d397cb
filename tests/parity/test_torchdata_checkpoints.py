"""StatefulDataLoader against torchdata 0.11's: layout, and checkpoints that cross over."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from conveyor.stateful_dataloader import StatefulDataLoader
from conveyor.stateful_dataloader.sampler import BatchSampler, RandomSampler

DATA = list(range(23))
pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


def _batches(
    loader_cls: type, num_workers: int, stop_after: int | None = None, state: Any = None
) -> tuple[list[list[int]], Any]:
    """Batches of one epoch (or the first ``stop_after``, then the loader's state)."""
    torch.manual_seed(11)
    loader = loader_cls(DATA, batch_size=4, shuffle=True, num_workers=num_workers)
    if state is not None:
        loader.load_state_dict(state)
    seen: list[list[int]] = []
    # Held while the state is taken: conveyor's loader keeps only a weak reference to its
    # epoch (state_dict() after leaving the loop is an open engine issue).
    iterator = iter(loader)
    for batch in iterator:
        seen.append(batch.tolist())
        if stop_after is not None and len(seen) == stop_after:
            break
    return seen, loader.state_dict()


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("stop_after", [1, 3, 6])
def test_a_torchdata_checkpoint_resumes_exactly(num_workers: int, stop_after: int) -> None:
    full, _ = _batches(TorchdataLoader, num_workers)
    _, state = _batches(TorchdataLoader, num_workers, stop_after=stop_after)
    rest, _ = _batches(StatefulDataLoader, num_workers, state=state)
    assert rest == full[stop_after:]


def test_an_ended_torchdata_epoch_continues_with_its_next_epoch() -> None:
    torch.manual_seed(11)
    reference = TorchdataLoader(DATA, batch_size=4, shuffle=True)
    list(reference)
    state = reference.state_dict()
    second_epoch = [batch.tolist() for batch in reference]
    loader = StatefulDataLoader(DATA, batch_size=4, shuffle=True)
    loader.load_state_dict(state)
    assert [batch.tolist() for batch in loader] == second_epoch


def test_same_shuffle_as_torchdata_without_workers() -> None:
    assert _batches(StatefulDataLoader, 0)[0] == _batches(TorchdataLoader, 0)[0]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_has_torchdatas_keys_and_is_json(num_workers: int) -> None:
    full, _ = _batches(StatefulDataLoader, num_workers)
    _, state = _batches(StatefulDataLoader, num_workers, stop_after=2)
    assert state["_num_yielded"] == 2
    assert state["_iterator_finished"] is False
    assert "samples_yielded" in state["_index_sampler_state"]
    restored = json.loads(json.dumps(state))
    rest, _ = _batches(StatefulDataLoader, num_workers, state=restored)
    assert rest == full[2:]


def test_an_adjusted_num_yielded_is_honoured() -> None:
    """accelerate lowers ``_num_yielded`` for batches it had prefetched: they come again."""
    full, _ = _batches(StatefulDataLoader, 0)
    _, state = _batches(StatefulDataLoader, 0, stop_after=3)
    state["_num_yielded"] -= 1
    rest, _ = _batches(StatefulDataLoader, 0, state=state)
    assert rest == full[2:]


def test_torchdatas_samplers_are_substituted_as_torchdata_does() -> None:
    loader = StatefulDataLoader(DATA, batch_size=4, shuffle=True)
    assert type(loader.sampler) is RandomSampler
    assert type(loader.batch_sampler) is BatchSampler
    reference = TorchdataLoader(DATA, batch_size=4, shuffle=True)
    assert type(reference.sampler).__name__ == type(loader.sampler).__name__


def test_a_torchdata_checkpoint_of_a_stream_is_refused() -> None:
    class Stream(torch.utils.data.IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(range(8))

    reference = TorchdataLoader(Stream(), batch_size=2)
    iterator = iter(reference)
    next(iterator)
    loader = StatefulDataLoader(Stream(), batch_size=2)
    with pytest.raises(ValueError, match="iterable-style"):
        loader.load_state_dict(reference.state_dict())
