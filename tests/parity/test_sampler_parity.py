"""conveyor.sampler against torch.utils.data.sampler: same indices, draws, lengths and errors."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

import conveyor.sampler as cvs

FEW = settings(max_examples=40, deadline=None)
Factory = Callable[[ModuleType, torch.Generator | None], Any]


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


SAMPLERS: dict[str, Factory] = {
    "sequential": lambda m, g: m.SequentialSampler(range(13)),
    "random": lambda m, g: m.RandomSampler(range(13), generator=g),
    "random_n1": lambda m, g: m.RandomSampler(range(1), generator=g),
    "random_fewer": lambda m, g: m.RandomSampler(range(13), num_samples=5, generator=g),
    "random_more": lambda m, g: m.RandomSampler(range(13), num_samples=40, generator=g),
    "random_exact_multiple": lambda m, g: m.RandomSampler(range(7), num_samples=21, generator=g),
    "replacement": lambda m, g: m.RandomSampler(range(13), True, generator=g),
    "replacement_64": lambda m, g: m.RandomSampler(range(5), True, 64, generator=g),
    "replacement_75": lambda m, g: m.RandomSampler(range(1000), True, 75, generator=g),
    "subset": lambda m, g: m.SubsetRandomSampler([5, 9, 2, 11, 40], generator=g),
    "subset_tuple": lambda m, g: m.SubsetRandomSampler((3, 1, 4, 1, 5), generator=g),
    "weighted": lambda m, g: m.WeightedRandomSampler([0.1, 0.9, 0.4, 3.0], 20, generator=g),
    "weighted_no_repl": lambda m, g: m.WeightedRandomSampler(
        [0.9, 0.4, 0.05, 0.2, 0.3, 0.1], 5, replacement=False, generator=g
    ),
    "weighted_tensor": lambda m, g: m.WeightedRandomSampler(
        torch.tensor([1.0, 2.0, 3.0]), 9, generator=g
    ),
}


def both(factory: Factory, seed: int | None) -> tuple[Any, Any, torch.Generator, torch.Generator]:
    """The torch and the conveyor sampler, each with its own generator seeded alike."""
    g_torch, g_ours = seeded(seed or 0), seeded(seed or 0)
    if seed is None:
        return factory(tud, None), factory(cvs, None), g_torch, g_ours
    return factory(tud, g_torch), factory(cvs, g_ours), g_torch, g_ours


@pytest.mark.parametrize("seed", [0, 1, 12345])
@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_same_indices_with_seeded_generator_over_epochs(name: str, seed: int) -> None:
    theirs, ours, g_torch, g_ours = both(SAMPLERS[name], seed)
    for _ in range(3):  # the shared generator advances identically epoch after epoch
        expected = list(theirs)
        assert list(ours) == expected
        assert len(ours) == len(theirs)
    assert torch.equal(g_ours.get_state(), g_torch.get_state())


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_same_indices_under_manual_seed(name: str) -> None:
    theirs, ours, _, _ = both(SAMPLERS[name], None)
    torch.manual_seed(2024)
    expected = [list(theirs), list(theirs)]
    torch.manual_seed(2024)
    assert [list(ours), list(ours)] == expected
    torch.manual_seed(2024)
    assert next(iter(ours)) == expected[0][0]


@pytest.mark.parametrize("take", [0, 1, 13, 14, 32, 33])
@pytest.mark.parametrize("name", ["random_more", "replacement_64", "replacement_75"])
def test_partial_iteration_leaves_generator_in_same_state(name: str, take: int) -> None:
    theirs, ours, g_torch, g_ours = both(SAMPLERS[name], 7)
    assert list(itertools.islice(ours, take)) == list(itertools.islice(theirs, take))
    assert torch.equal(g_ours.get_state(), g_torch.get_state())


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("batch_size", [1, 5, 32])
@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_batch_sampler_same_batches(name: str, batch_size: int, drop_last: bool) -> None:
    inner_theirs, inner_ours, g_torch, g_ours = both(SAMPLERS[name], 3)
    theirs = tud.BatchSampler(inner_theirs, batch_size, drop_last)
    ours = cvs.BatchSampler(inner_ours, batch_size, drop_last)
    for _ in range(2):
        assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)
    assert torch.equal(g_ours.get_state(), g_torch.get_state())


@pytest.mark.parametrize("take", [0, 1, 2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batch_sampler_draws_lazily_like_torch(take: int, drop_last: bool) -> None:
    def make(m: ModuleType, g: torch.Generator | None) -> Any:
        return m.BatchSampler(m.RandomSampler(range(10), True, 70, g), 16, drop_last)

    theirs, ours, g_torch, g_ours = both(make, 11)
    assert list(itertools.islice(ours, take)) == list(itertools.islice(theirs, take))
    assert torch.equal(g_ours.get_state(), g_torch.get_state())


class GetitemOnly:
    """Iterable through the old ``__getitem__`` protocol: no ``__iter__``."""

    def __getitem__(self, index: int) -> int:
        if index >= 7:
            raise IndexError(index)
        return 10 * index


PLAIN_SOURCES: dict[str, Callable[[], Any]] = {
    "range": lambda: range(10),
    "list": lambda: list(range(10)),
    "iterator": lambda: iter(range(10)),
    "generator": lambda: (i * i for i in range(10)),
    "empty": lambda: [],
    "getitem_only": GetitemOnly,
}


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("batch_size", [1, 4, 10, 11])
@pytest.mark.parametrize("source", sorted(PLAIN_SOURCES))
def test_batch_sampler_over_plain_iterables(source: str, batch_size: int, drop_last: bool) -> None:
    make = PLAIN_SOURCES[source]
    theirs = tud.BatchSampler(make(), batch_size, drop_last)
    ours = cvs.BatchSampler(make(), batch_size, drop_last)
    assert list(ours) == list(theirs)
    if source in {"range", "list", "empty"}:
        assert len(ours) == len(theirs)
        assert list(ours) == list(theirs)  # re-iterable sources give a second epoch


@FEW
@given(
    n=st.integers(1, 80),
    num_samples=st.none() | st.integers(1, 200),
    replacement=st.booleans(),
    batch_size=st.integers(1, 40),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**40),
)
def test_random_batches_match_torch_property(
    *,
    n: int,
    num_samples: int | None,
    replacement: bool,
    batch_size: int,
    drop_last: bool,
    seed: int,
) -> None:
    def make(m: ModuleType, g: torch.Generator | None) -> Any:
        inner = m.RandomSampler(range(n), replacement, num_samples, g)
        return m.BatchSampler(inner, batch_size, drop_last)

    theirs, ours, g_torch, g_ours = both(make, seed)
    assert list(ours) == list(theirs)
    assert torch.equal(g_ours.get_state(), g_torch.get_state())


def raised(call: Callable[[], Any]) -> BaseException | None:
    try:
        call()
    except Exception as error:
        return error
    return None


BAD_ARGUMENTS: dict[str, Factory] = {
    "random_replacement_int": lambda m, g: m.RandomSampler(range(3), replacement=1),
    "random_replacement_none": lambda m, g: m.RandomSampler(range(3), replacement=None),
    "random_num_samples_zero": lambda m, g: m.RandomSampler(range(3), num_samples=0),
    "random_num_samples_float": lambda m, g: m.RandomSampler(range(3), num_samples=3.0),
    "random_empty": lambda m, g: m.RandomSampler([]),
    "random_unsized": lambda m, g: m.RandomSampler(iter([1, 2])),
    "weighted_num_samples_zero": lambda m, g: m.WeightedRandomSampler([1.0], 0),
    "weighted_num_samples_bool": lambda m, g: m.WeightedRandomSampler([1.0], True),
    "weighted_num_samples_str": lambda m, g: m.WeightedRandomSampler([1.0], "3"),
    "weighted_replacement": lambda m, g: m.WeightedRandomSampler([1.0], 1, replacement=0),
    "weighted_2d": lambda m, g: m.WeightedRandomSampler([[1.0, 2.0]], 1),
    "weighted_scalar": lambda m, g: m.WeightedRandomSampler(1.0, 1),
    "weighted_strings": lambda m, g: m.WeightedRandomSampler(["a"], 1),
    "batch_size_zero": lambda m, g: m.BatchSampler(range(3), 0, False),
    "batch_size_bool": lambda m, g: m.BatchSampler(range(3), True, False),
    "batch_size_float": lambda m, g: m.BatchSampler(range(3), 2.0, False),
    "batch_drop_last_int": lambda m, g: m.BatchSampler(range(3), 2, 1),
    "batch_len_unsized": lambda m, g: len(m.BatchSampler(iter(range(3)), 2, False)),
    "sequential_len_unsized": lambda m, g: len(m.SequentialSampler(iter(range(3)))),
    "base_iter": lambda m, g: iter(m.Sampler()),
    "base_len": lambda m, g: len(m.Sampler()),
}


@pytest.mark.parametrize("name", sorted(BAD_ARGUMENTS))
def test_same_errors_for_bad_arguments(name: str) -> None:
    theirs = raised(lambda: BAD_ARGUMENTS[name](tud, None))
    ours = raised(lambda: BAD_ARGUMENTS[name](cvs, None))
    assert theirs is not None
    assert type(ours) is type(theirs)
    if isinstance(theirs, ValueError | TypeError) and "should be" in str(theirs):
        assert str(ours) == str(theirs)


# Where torch fails late (on the first next()) or with an accidental exception type,
# conveyor fails early with a ValueError that names the argument.
STRICTER: dict[str, Factory] = {
    "weighted_negative": lambda m, g: list(m.WeightedRandomSampler([1.0, -1.0], 1)),
    "weighted_all_zero": lambda m, g: list(m.WeightedRandomSampler([0.0, 0.0], 1)),
    "weighted_inf": lambda m, g: list(m.WeightedRandomSampler([1.0, float("inf")], 1)),
    "weighted_too_many": lambda m, g: list(m.WeightedRandomSampler([1.0, 1.0], 3, False)),
    "random_empty_num_samples": lambda m, g: list(m.RandomSampler([], num_samples=2)),
    "random_empty_replacement": lambda m, g: list(m.RandomSampler([], True, 2)),
}


@pytest.mark.parametrize("name", sorted(STRICTER))
def test_stricter_errors_where_torch_fails_late(name: str) -> None:
    assert raised(lambda: STRICTER[name](tud, None)) is not None
    assert type(raised(lambda: STRICTER[name](cvs, None))) is ValueError


def test_public_names_match_torch_module() -> None:
    import torch.utils.data.sampler as torch_sampler

    assert set(cvs.__all__) == set(torch_sampler.__all__)
