"""conveyor.to_device with real loaders and worker processes, on the CPU device.

``device="cpu"`` runs the same prefetching as CUDA without streams, so what matters for
checkpoints is checked here: batches pulled ahead and not delivered are not counted, and a
resume yields exactly the batches the loop has not seen. tests/gpu repeats it on CUDA.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import conveyor
from conveyor import DataLoader, to_device
from conveyor.stateful_dataloader import StatefulDataLoader

N, BATCH = 40, 4


class Numbers(conveyor.Dataset[dict[str, Any]]):
    def __init__(self, bad: int | None = None):
        self.bad = bad

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i == self.bad:
            raise ValueError(f"sample {i} is bad")
        return {"x": torch.full((2,), float(i)), "i": i}


def _loader(cls: Any = DataLoader, **kw: Any) -> Any:
    generator = torch.Generator().manual_seed(7)
    return cls(Numbers(), batch_size=BATCH, shuffle=True, num_workers=2, generator=generator, **kw)


def _ids(batch: dict[str, Any]) -> list[int]:
    return [int(i) for i in batch["i"]]


def _epoch(loader: Any) -> list[list[int]]:
    return [_ids(batch) for batch in loader]


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_batches_and_order_are_the_loaders(depth: int) -> None:
    expected = _epoch(_loader())
    wrapped = to_device(_loader(), "cpu", depth=depth)
    assert len(wrapped) == len(expected) == N // BATCH
    got = [_ids(batch) for batch in wrapped]
    assert got == expected
    assert isinstance(wrapped.dataset, Numbers) and wrapped.batch_size == BATCH


@pytest.mark.parametrize("cls", [DataLoader, StatefulDataLoader])
@pytest.mark.parametrize("taken", [0, 1, 4, 9])
def test_a_checkpoint_counts_only_delivered_batches(cls: Any, taken: int) -> None:
    expected = _epoch(_loader(cls))
    wrapped = to_device(_loader(cls), "cpu", depth=3)
    iterator = iter(wrapped)
    seen = [_ids(next(iterator)) for _ in range(taken)]
    del iterator  # the loop is left (as by break) with batches in flight
    state = wrapped.state_dict()
    ahead = wrapped.loader.state_dict()  # the loader itself was pulled up to 3 further
    resumed = to_device(_loader(cls), "cpu", depth=3)
    resumed.load_state_dict(state)
    assert seen + _epoch(resumed) == expected
    if 0 < taken < len(expected) - 3:  # the control: the loader's own state skips batches
        control = _loader(cls)
        control.load_state_dict(ahead)
        assert len(_epoch(control)) == len(expected) - taken - 3


def test_a_checkpoint_mid_loop_and_after_the_epoch() -> None:
    expected = _epoch(_loader())
    wrapped = to_device(_loader(), "cpu", depth=2)
    iterator = iter(wrapped)
    first = [_ids(next(iterator)) for _ in range(3)]
    state = wrapped.state_dict()  # while the loop runs, 2 batches in flight
    rest = [_ids(batch) for batch in iterator]
    assert first + rest == expected
    end = wrapped.state_dict()
    assert end["in_epoch"] is False  # the loader's end-of-epoch state
    resumed = to_device(_loader(), "cpu")
    resumed.load_state_dict(state)
    assert _epoch(resumed) == expected[3:]


def test_an_error_in_a_worker_arrives_at_its_batch() -> None:
    loader = DataLoader(Numbers(bad=13), batch_size=BATCH, num_workers=2)
    iterator = iter(to_device(loader, "cpu", depth=3))
    assert [_ids(next(iterator)) for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    with pytest.raises(ValueError, match="sample 13 is bad"):
        next(iterator)
    assert _ids(next(iterator)) == [16, 17, 18, 19]
    del iterator


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="depth should be an int >= 0"):
        to_device(_loader(), "cpu", depth=-1)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            to_device(_loader(), "cuda")
    plain = to_device([torch.ones(1)], "cpu")
    assert [b.tolist() for b in plain] == [[1.0]]
    with pytest.raises(TypeError, match="no state_dict"):
        plain.state_dict()
