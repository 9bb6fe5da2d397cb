"""conveyor.dataset against torch.utils.data.dataset: same samples, splits, warnings, errors."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

import conveyor.dataset as cvd

FEW = settings(max_examples=40, deadline=None)


class Squares(cvd.Dataset[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __getitem__(self, index: int) -> int:
        return index * index

    def __len__(self) -> int:
        return self.n


class Batched(Squares):
    def __getitems__(self, indices: list[int]) -> list[int]:
        return [-i for i in indices]


def stream(module: ModuleType, items: list[int]) -> Any:
    class Stream(module.IterableDataset):  # type: ignore[name-defined,misc]
        def __iter__(self) -> Iterator[int]:
            return iter(items)

        def __len__(self) -> int:
            return len(items)

    return Stream()


def as_plain(value: Any) -> Any:
    """Tensors as lists, so results from both libraries compare with ``==``."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, tuple | list):
        return type(value)(as_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: as_plain(v) for k, v in value.items()}
    return value


def test_tensor_dataset_same_rows() -> None:
    x, y = torch.randn(6, 2), torch.arange(6)
    theirs, ours = tud.TensorDataset(x, y), cvd.TensorDataset(x, y)
    assert len(ours) == len(theirs)
    for index in [0, 5, -1, slice(1, 4), [0, 2]]:
        assert as_plain(ours[index]) == as_plain(theirs[index])


@pytest.mark.parametrize("named", [False, True])
@pytest.mark.parametrize("indices", [[], [0], [3, 1, 3]])
def test_stack_dataset_same_items_and_batches(named: bool, indices: list[int]) -> None:
    members = [Squares(5), Batched(5), list(range(10, 15))]

    def make(m: ModuleType) -> Any:
        if named:
            return m.StackDataset(a=members[0], b=members[1], c=members[2])
        return m.StackDataset(*members)

    theirs, ours = make(tud), make(cvd)
    assert len(ours) == len(theirs)
    assert [ours[i] for i in indices] == [theirs[i] for i in indices]
    assert ours.__getitems__(indices) == theirs.__getitems__(indices)


def concat_members() -> list[Any]:
    return [list(range(3)), [], Squares(4), torch.arange(100, 102), []]


def test_concat_dataset_same_items_and_sizes() -> None:
    theirs, ours = tud.ConcatDataset(concat_members()), cvd.ConcatDataset(concat_members())
    assert len(ours) == len(theirs)
    assert ours.cumulative_sizes == theirs.cumulative_sizes
    for index in range(-len(theirs), len(theirs)):
        assert as_plain(ours[index]) == as_plain(theirs[index])


def test_add_gives_same_composites() -> None:
    concat_theirs = tud.Dataset.__add__(Squares(2), Squares(3))
    concat_ours = Squares(2) + Squares(3)
    assert [concat_ours[i] for i in range(5)] == [concat_theirs[i] for i in range(5)]
    assert list(stream(cvd, [1]) + stream(cvd, [2, 3])) == list(
        stream(tud, [1]) + stream(tud, [2, 3])
    )


@pytest.mark.parametrize("module", [cvd, tud], ids=["own_members", "torch_members"])
def test_chain_dataset_same_stream_and_length(module: ModuleType) -> None:
    def members(m: ModuleType) -> list[Any]:
        return [stream(m, [1, 2]), stream(m, []), stream(m, [3])]

    theirs, ours = tud.ChainDataset(members(tud)), cvd.ChainDataset(members(module))
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)


@pytest.mark.parametrize("indices", [[], [4], [4, 0, 4, 2]])
def test_subset_same_items_and_batches(indices: list[int]) -> None:
    for base in (Squares(10), Batched(10)):
        theirs, ours = tud.Subset(base, [9, 1, 5, 3, 7]), cvd.Subset(base, [9, 1, 5, 3, 7])
        assert len(ours) == len(theirs)
        assert [ours[i] for i in indices] == [theirs[i] for i in indices]
        assert ours.__getitems__(indices) == theirs.__getitems__(indices)


SPLITS: list[list[float]] = [
    [3, 7],
    [10],
    [0, 10],
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    [0.5, 0.5],
    [0.3, 0.3, 0.4],
    [0.1, 0.2, 0.3, 0.4],
    [1 / 3, 1 / 3, 1 / 3],
    [0.25, 0.25, 0.25, 0.25],
    [1.0],
]


@pytest.mark.parametrize("size", [10, 11, 17])
@pytest.mark.parametrize("lengths", SPLITS, ids=str)
def test_random_split_same_splits(lengths: list[float], size: int) -> None:
    if sum(lengths) > 1.5 and sum(lengths) != size:
        lengths = [*lengths[:-1], lengths[-1] + size - sum(lengths)]
    theirs = tud.random_split(range(size), lengths, generator=seeded(4))
    ours = cvd.random_split(range(size), lengths, generator=seeded(4))
    assert [list(p.indices) for p in ours] == [list(p.indices) for p in theirs]
    assert [list(p) for p in ours] == [list(p) for p in theirs]


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@FEW
@given(
    size=st.integers(0, 60),
    shares=st.lists(st.integers(1, 10), min_size=1, max_size=6),
    seed=st.integers(0, 2**40),
)
def test_random_split_fractions_property(size: int, shares: list[int], seed: int) -> None:
    fractions = [share / sum(shares) for share in shares]

    def split(m: ModuleType) -> tuple[Any, list[str]]:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            try:
                parts: Any = [
                    p.indices for p in m.random_split(range(size), fractions, seeded(seed))
                ]
            except ValueError as error:  # rounding can push the sum just past 1
                parts = str(error)
        return parts, [str(w.message) for w in warned]

    assert split(cvd) == split(tud)


def test_random_split_default_generator_same_under_manual_seed() -> None:
    torch.manual_seed(9)
    theirs = [p.indices for p in tud.random_split(range(30), [0.2, 0.8])]
    state_after_theirs = torch.random.get_rng_state()
    torch.manual_seed(9)
    ours = [p.indices for p in cvd.random_split(range(30), [0.2, 0.8])]
    assert ours == theirs
    assert torch.equal(torch.random.get_rng_state(), state_after_theirs)


def test_random_split_same_zero_length_warning() -> None:
    with pytest.warns(UserWarning) as theirs:
        tud.random_split(range(2), [0.2, 0.2, 0.6], generator=seeded(0))
    with pytest.warns(UserWarning) as ours:
        cvd.random_split(range(2), [0.2, 0.2, 0.6], generator=seeded(0))
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]
    assert [w.filename for w in ours] == [__file__] * len(ours)  # blames the caller


def raised(call: Callable[[], Any]) -> BaseException | None:
    try:
        call()
    except Exception as error:
        return error
    return None


BAD_INPUTS: dict[str, Callable[[ModuleType], Any]] = {
    "tensor_mismatch": lambda m: m.TensorDataset(torch.zeros(2), torch.zeros(3)),
    "stack_both": lambda m: m.StackDataset([1], b=[1]),
    "stack_none": lambda m: m.StackDataset(),
    "stack_mismatch": lambda m: m.StackDataset(a=[1], b=[1, 2]),
    "stack_unsized": lambda m: m.StackDataset(iter([1])),
    "concat_empty": lambda m: m.ConcatDataset([]),
    "concat_iterable_own": lambda m: m.ConcatDataset([[1], stream(m, [1])]),
    "concat_iterable_torch": lambda m: m.ConcatDataset([[1], stream(tud, [1])]),
    "concat_too_negative": lambda m: m.ConcatDataset([[1], [2]])[-3],
    "concat_past_end": lambda m: m.ConcatDataset([[1], [2]])[2],
    "chain_map_member_iter": lambda m: list(m.ChainDataset([stream(m, [1]), [1]])),
    "chain_map_member_len": lambda m: len(m.ChainDataset([[1]])),
    "subset_past_end": lambda m: m.Subset([1, 2], [0, 5])[1],
    "split_sum": lambda m: m.random_split(range(5), [2, 2]),
    "split_fraction_range": lambda m: m.random_split(range(5), [1.2, -0.2]),
    "split_fraction_sum": lambda m: m.random_split(range(5), [0.2, 0.2]),
    "split_unsized": lambda m: m.random_split(iter(range(5)), [0.5, 0.5]),
    "dataset_getitem": lambda m: m.Dataset()[0],
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_same_errors_for_bad_inputs(name: str) -> None:
    theirs = raised(lambda: BAD_INPUTS[name](tud))
    ours = raised(lambda: BAD_INPUTS[name](cvd))
    assert theirs is not None
    assert type(ours) is type(theirs)
    if isinstance(theirs, AssertionError | ValueError | NotImplementedError):
        assert str(ours).replace(" ", "") == str(theirs).replace(" ", "")


def test_cummulative_sizes_warns_like_torch() -> None:
    with pytest.warns(FutureWarning, match="renamed to `cumulative_sizes`"):
        assert tud.ConcatDataset([[1]]).cummulative_sizes == [1]
    with pytest.warns(FutureWarning, match="renamed to `cumulative_sizes`"):
        assert cvd.ConcatDataset([[1]]).cummulative_sizes == [1]


def test_public_names_match_torch_module() -> None:
    import torch.utils.data.dataset as torch_dataset

    assert set(cvd.__all__) == set(torch_dataset.__all__)
