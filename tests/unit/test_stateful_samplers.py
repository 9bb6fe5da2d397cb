"""Stateful samplers: checkpoint at every position, the next iteration continues."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from conveyor.stateful_dataloader import StatefulDataLoader
from conveyor.stateful_dataloader.sampler import (
    BatchSampler,
    RandomSampler,
    StatefulDistributedSampler,
)


def _roundtrip(make: Any) -> None:
    full = list(make())
    assert len(full) > 2
    for k in range(len(full) + 1):
        sampler = make()
        it = iter(sampler)
        head = [next(it) for _ in range(k)]
        state = sampler.state_dict()
        fresh = make()
        fresh.load_state_dict(state)
        assert head + list(fresh) == full, k


@pytest.mark.parametrize("replacement", [False, True])
@pytest.mark.parametrize("with_generator", [False, True])
def test_random_sampler_roundtrip(replacement: bool, with_generator: bool) -> None:
    def make() -> RandomSampler:
        torch.manual_seed(3)  # only matters without a generator
        generator = torch.Generator().manual_seed(5) if with_generator else None
        return RandomSampler(range(9), replacement=replacement, generator=generator)

    _roundtrip(make)


def test_random_sampler_matches_plain_order() -> None:
    from conveyor.sampler import RandomSampler as Plain

    ours = list(RandomSampler(range(20), generator=torch.Generator().manual_seed(1)))
    assert ours == list(Plain(range(20), generator=torch.Generator().manual_seed(1)))


def test_batch_sampler_roundtrip() -> None:
    _roundtrip(
        lambda: BatchSampler(
            RandomSampler(range(10), generator=torch.Generator().manual_seed(2)), 3, False
        )
    )


def test_distributed_sampler_roundtrip() -> None:
    def make() -> StatefulDistributedSampler[int]:
        sampler: StatefulDistributedSampler[int] = StatefulDistributedSampler(
            range(11), num_replicas=2, rank=1, seed=4
        )
        sampler.set_epoch(3)
        return sampler

    _roundtrip(make)


def test_invalid_states_are_rejected() -> None:
    with pytest.raises(ValueError, match="Invalid state_dict"):
        RandomSampler(range(3)).load_state_dict({"version": 0})
    with pytest.raises(ValueError, match="negative"):
        StatefulDistributedSampler(range(3), 1, 0).load_state_dict({"yielded": -1})
    with pytest.raises(ValueError, match="Invalid state_dict"):
        BatchSampler(range(3), 2, False).load_state_dict({})


def test_torchdata_state_layout_and_attributes() -> None:
    """torchdata 0.11's keys and attributes: code reading or patching them keeps working."""
    distributed: StatefulDistributedSampler[int] = StatefulDistributedSampler(range(10), 2, 0)
    assert (distributed.yielded, distributed.next_yielded) == (0, None)
    it = iter(distributed)
    next(it)
    next(it)
    assert distributed.state_dict() == {"yielded": 2}
    assert json.loads(json.dumps(distributed.state_dict())) == {"yielded": 2}
    distributed.load_state_dict({"yielded": 3})
    assert distributed.next_yielded == 3
    assert list(distributed) == list(StatefulDistributedSampler(range(10), 2, 0))[3:]
    assert distributed.yielded == 5

    random = RandomSampler(range(6), generator=torch.Generator().manual_seed(0))
    batches = BatchSampler(random, 4, drop_last=False)
    next(iter(batches))
    state = batches.state_dict()
    assert set(state) == {"samples_yielded", "sampler_state"}
    assert state["samples_yielded"] == 4
    assert set(state["sampler_state"]) == {"yielded", "generator"}
    assert state["sampler_state"]["yielded"] == 4


def test_stateful_dataloader_constructor_and_resume() -> None:
    with pytest.raises(ValueError, match="snapshot_every_n_steps"):
        StatefulDataLoader(list(range(4)), snapshot_every_n_steps=-1)
    # torchdata takes 0 ("only when asked"); every step is exact here anyway
    assert StatefulDataLoader(list(range(4)), snapshot_every_n_steps=0).snapshot_every_n_steps == 0

    def make() -> StatefulDataLoader[int]:
        return StatefulDataLoader(
            list(range(10)),
            batch_size=2,
            shuffle=True,
            num_workers=2,
            snapshot_every_n_steps=100,
            generator=torch.Generator().manual_seed(0),
        )

    reference = [b.tolist() for b in make()]
    loader = make()
    it = iter(loader)
    head = [next(it).tolist() for _ in range(2)]
    state = loader.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [b.tolist() for b in resumed] == reference


def test_stateful_sampler_inside_a_loader_resumes() -> None:
    def make() -> StatefulDataLoader[int]:
        sampler = RandomSampler(range(12), generator=torch.Generator().manual_seed(9))
        return StatefulDataLoader(list(range(12)), batch_size=5, sampler=sampler)

    reference = [b.tolist() for b in make()]
    loader = make()
    it = iter(loader)
    head = [next(it).tolist()]
    state = loader.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [b.tolist() for b in resumed] == reference


def test_state_dict_json_form_is_fresh_each_call_and_follows_tensor_changes() -> None:
    """The list form of a repeated tensor is cached: each state still owns its lists, and
    a tensor changed in place is converted again."""
    from conveyor.stateful_dataloader.torchdata_state import to_json

    tensor = torch.arange(6, dtype=torch.uint8)
    first, second = to_json({"g": tensor}), to_json({"g": tensor})
    assert first == second and first["g"]["__tensor__"] is not second["g"]["__tensor__"]
    first["g"]["__tensor__"].append(99)  # a user editing one state leaves the next alone
    assert to_json({"g": tensor})["g"]["__tensor__"] == [0, 1, 2, 3, 4, 5]
    tensor[0] = 7
    assert to_json({"g": tensor})["g"]["__tensor__"][0] == 7


def test_state_json_form_takes_tensors_of_any_rank() -> None:
    """A dataset's state may hold 0-d tensors (torchdata's TestDynamicStateIterableDataset
    does): each rank round-trips, and no call's lists are another call's."""
    from conveyor.stateful_dataloader.torchdata_state import from_json, to_json

    state = {
        "scalar": torch.tensor(3, dtype=torch.int8),
        "vector": torch.arange(4),
        "matrix": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    }
    first, second = to_json(state), to_json(state)
    assert first["scalar"] == {"__tensor__": 3, "dtype": "int8"}
    first["matrix"]["__tensor__"][0][0] = 99.0
    assert second["matrix"]["__tensor__"][0][0] == 0.0
    back = from_json(second)
    for key, tensor in state.items():
        assert back[key].dtype == tensor.dtype and torch.equal(back[key], tensor)
