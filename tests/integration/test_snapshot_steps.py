"""``snapshot_every_n_steps`` as torchdata documents it: how often workers send their
stream's state. Every step's checkpoint stays exact: the main process counts the batches
each worker delivered since its last state, and a resume reads those again."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import DataLoader, ShardedStream

from sample_datasets import CountedStream

KINDS = ["process", "thread"]


def _loader(every: int | None, worker_type: str, dataset: Any = None) -> DataLoader[Any]:
    return DataLoader(
        dataset if dataset is not None else CountedStream(40),
        batch_size=2,
        num_workers=2,
        worker_type=worker_type,
        snapshot_every_n_steps=every,
    )


@pytest.mark.parametrize("worker_type", KINDS)
@pytest.mark.parametrize("every", [None, 1, 4, 10, 0])
def test_every_step_resumes_exactly_whatever_the_snapshot_interval(
    every: int | None, worker_type: str
) -> None:
    whole = [b.tolist() for b in _loader(every, worker_type)]
    for k in (0, 1, 3, 7, 12, len(whole)):
        loader = _loader(every, worker_type)
        iterator = iter(loader)
        head = [next(iterator).tolist() for _ in range(k)]
        state = loader.state_dict()
        del iterator
        lag = state["workers"]["counts"]
        if every in (None, 1):
            assert lag == [0, 0], "with every batch, no batch is read again"
        elif every == 0 and 0 < k < len(whole):
            assert sum(lag) == k, "no state ever sent: everything delivered is read again"
        resumed = _loader(every, worker_type)
        resumed.load_state_dict(state)
        assert head + [b.tolist() for b in resumed] == whole, f"resume at {k}"


def test_states_reach_the_main_process_about_every_n_steps() -> None:
    loader = _loader(8, "thread")
    iterator = iter(loader)
    lags = []
    for _ in range(16):
        next(iterator)
        lags.append(max(loader.state_dict()["workers"]["counts"]))
    assert max(lags) == 3 and 0 in lags  # each worker sends its state every 8 // 2 batches


def _read(shard: list[int], offset: int) -> Any:
    return iter(shard[offset:])


def test_an_elastic_resume_needs_current_states() -> None:
    """Merging streams' progress needs every worker's state as of its last batch."""
    stream = ShardedStream([list(range(i, i + 5)) for i in range(0, 40, 5)], _read)
    loader = _loader(10, "thread", stream)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    state = loader.state_dict()
    del iterator
    other = DataLoader(stream, batch_size=2, num_workers=3, worker_type="thread")
    with pytest.raises(ValueError, match="snapshot_every_n_steps=1"):
        other.load_state_dict(state)
        next(iter(other))
