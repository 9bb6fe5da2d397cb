"""Unit tests for conveyor.dataset (behaviour on its own; parity with torch is in tests/parity)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.utils.data as tud

from conveyor.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)


class Squares(Dataset[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __getitem__(self, index: int) -> int:
        return index * index

    def __len__(self) -> int:
        return self.n


class Batched(Squares):
    """Records the index lists given to ``__getitems__``."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.calls: list[list[int]] = []

    def __getitems__(self, indices: list[int]) -> list[int]:
        self.calls.append(list(indices))
        return [-i for i in indices]


class Stream(IterableDataset[int]):
    def __init__(self, items: list[int]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[int]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class TorchStream(tud.IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter([7, 8])

    def __len__(self) -> int:
        return 2


def test_base_dataset_getitem_is_abstract() -> None:
    with pytest.raises(NotImplementedError):
        Dataset()[0]
    with pytest.raises(NotImplementedError):
        iter(IterableDataset())


def test_tensor_dataset_rows_and_length() -> None:
    x, y = torch.arange(12).reshape(4, 3), torch.arange(4)
    ds = TensorDataset(x, y)
    assert len(ds) == 4
    row = ds[2]
    assert isinstance(row, tuple)
    assert torch.equal(row[0], x[2])
    assert torch.equal(row[1], y[2])


def test_tensor_dataset_rejects_mismatch_and_nothing() -> None:
    with pytest.raises(AssertionError, match="Size mismatch"):
        TensorDataset(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="at least one tensor"):
        TensorDataset()


def test_stack_dataset_tuple_and_dict_forms() -> None:
    a, b = Squares(5), list(range(10, 15))
    assert StackDataset(a, b)[3] == (9, 13)
    assert StackDataset(x=a, y=b)[3] == {"x": 9, "y": 13}
    assert len(StackDataset(a, b)) == 5


@pytest.mark.parametrize("named", [False, True])
def test_stack_dataset_getitems_uses_member_getitems(named: bool) -> None:
    batched, plain = Batched(4), Squares(4)
    ds = StackDataset(p=plain, b=batched) if named else StackDataset(plain, batched)
    got = ds.__getitems__([1, 3])
    assert batched.calls == [[1, 3]]
    expected: list[Any] = [(1, -1), (9, -3)]
    if named:
        expected = [{"p": 1, "b": -1}, {"p": 9, "b": -3}]
    assert got == expected


def test_stack_dataset_errors() -> None:
    with pytest.raises(ValueError, match="both types"):
        StackDataset(Squares(2), y=Squares(2))
    with pytest.raises(ValueError, match="At least one"):
        StackDataset()
    with pytest.raises(ValueError, match="Size mismatch"):
        StackDataset(Squares(2), Squares(3))

    class Short(Squares):
        def __getitems__(self, indices: list[int]) -> list[int]:
            return [0]

    with pytest.raises(ValueError, match="Expected 2, got 1"):
        StackDataset(Short(3)).__getitems__([0, 1])


def test_concat_dataset_indexing_across_members() -> None:
    ds = ConcatDataset([[0, 1, 2], [], [3], [4, 5]])
    assert len(ds) == 6
    assert ds.cumulative_sizes == [3, 3, 4, 6]
    assert [ds[i] for i in range(6)] == [0, 1, 2, 3, 4, 5]
    assert [ds[-i] for i in range(1, 7)] == [5, 4, 3, 2, 1, 0]


def test_concat_dataset_index_errors() -> None:
    ds = ConcatDataset([[0, 1], [2]])
    with pytest.raises(ValueError, match="absolute value"):
        ds[-4]
    with pytest.raises(IndexError, match="length 3"):
        ds[3]


def test_concat_dataset_rejects_iterables_and_empty() -> None:
    with pytest.raises(AssertionError, match="does not support IterableDataset"):
        ConcatDataset([[1], Stream([1])])
    with pytest.raises(AssertionError, match="does not support IterableDataset"):
        ConcatDataset([[1], TorchStream()])
    with pytest.raises(AssertionError, match="empty iterable"):
        ConcatDataset([])


def test_concat_dataset_deprecated_spelling_warns() -> None:
    ds = ConcatDataset([[1], [2]])
    with pytest.warns(FutureWarning, match="cumulative_sizes"):
        assert ds.cummulative_sizes == [1, 2]
    assert ConcatDataset.cumsum([[1, 2], [3]]) == [2, 3]


def test_add_builds_concat_and_chain() -> None:
    concat = Squares(2) + Squares(3)
    assert isinstance(concat, ConcatDataset)
    assert [concat[i] for i in range(5)] == [0, 1, 0, 1, 4]
    chain = Stream([1, 2]) + Stream([3])
    assert isinstance(chain, ChainDataset)
    assert list(chain) == [1, 2, 3]


def test_chain_dataset_accepts_torch_streams_and_sums_lengths() -> None:
    ds = ChainDataset([Stream([1, 2]), TorchStream()])
    assert list(ds) == [1, 2, 7, 8]
    assert len(ds) == 4


def test_chain_dataset_checks_members_lazily() -> None:
    ds = ChainDataset([Stream([1]), Squares(2)])  # construction does not check
    it = iter(ds)
    assert next(it) == 1
    with pytest.raises(AssertionError, match="only supports IterableDataset"):
        next(it)
    with pytest.raises(AssertionError, match="only supports IterableDataset"):
        len(ds)


def test_subset_getitem_and_list_index() -> None:
    sub = Subset(Squares(10), [9, 2, 4])
    assert len(sub) == 3
    assert [sub[i] for i in range(3)] == [81, 4, 16]
    listy = Subset(list(range(100, 110)), [5, 1])
    with pytest.raises(TypeError):
        listy[[0, 1]]  # a plain list cannot take a list index: forwarded as is
    assert Subset(torch.arange(10, 20), [5, 1])[[0, 1]].tolist() == [15, 11]


def test_subset_getitems_delegates_or_falls_back() -> None:
    batched = Batched(10)
    assert Subset(batched, [9, 2, 4]).__getitems__([0, 2]) == [-9, -4]
    assert batched.calls == [[9, 4]]
    assert Subset(Squares(10), [9, 2, 4]).__getitems__([0, 2]) == [81, 16]


def test_subset_subclass_overriding_only_getitem_is_used_for_batches() -> None:
    class Doubled(Subset[int]):
        def __getitem__(self, idx: Any) -> int:
            return 2 * super().__getitem__(idx)

    sub = Doubled(Batched(10), [3, 5])
    assert sub.__getitems__([0, 1]) == [18, 50]


def test_random_split_lengths_are_disjoint_and_cover() -> None:
    parts = random_split(range(10), [3, 7], generator=torch.Generator().manual_seed(1))
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(i for p in parts for i in p.indices) == list(range(10))


@pytest.mark.parametrize(
    ("fractions", "expected"),
    [
        ([0.5, 0.5], [5, 5]),
        ([0.3, 0.3, 0.4], [3, 3, 4]),
        ([0.34, 0.33, 0.33], [4, 3, 3]),
        ([0.25, 0.25, 0.25, 0.25], [3, 3, 2, 2]),
        ([1.0], [10]),
    ],
)
def test_random_split_fractions_round_robin_remainder(
    fractions: list[float], expected: list[int]
) -> None:
    parts = random_split(range(10), fractions, generator=torch.Generator().manual_seed(0))
    assert [len(p) for p in parts] == expected


def test_random_split_warns_on_empty_split() -> None:
    with pytest.warns(UserWarning, match="index 1 is 0"):
        parts = random_split(range(1), [0.9, 0.1], generator=torch.Generator())
    assert [len(p) for p in parts] == [1, 0]


@pytest.mark.parametrize(
    ("lengths", "message"),
    [
        ([3, 3], "Sum of input lengths"),
        ([1.5, -0.5], "not between 0 and 1"),
        ([0.3, 0.3], "Sum of input lengths"),
    ],
)
def test_random_split_errors(lengths: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        random_split(range(10), lengths)


def test_random_split_default_generator_follows_manual_seed() -> None:
    torch.manual_seed(5)
    first = [p.indices for p in random_split(range(20), [0.5, 0.5])]
    torch.manual_seed(5)
    second = [p.indices for p in random_split(range(20), [0.5, 0.5])]
    assert first == second
