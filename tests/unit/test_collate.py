"""conveyor.collate on its own: the registry, the output-allocator hook and the error paths."""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
import torch

from conveyor.collate import (
    CollateFnMap,
    collate,
    collate_int_fn,
    collate_numpy_array_fn,
    collate_str_fn,
    collate_tensor_fn,
    default_collate,
    default_collate_fn_map,
    default_convert,
    get_output_allocator,
    set_output_allocator,
    stack_into,
)


class Slab:
    """A test allocator: hands out the front of one preallocated buffer and logs requests."""

    def __init__(self, numel: int, dtype: torch.dtype = torch.uint8) -> None:
        self.buffer = torch.zeros(numel, dtype=dtype)
        self.requests: list[tuple[int, torch.dtype]] = []

    def __call__(self, numel: int, dtype: torch.dtype) -> torch.Tensor | None:
        self.requests.append((numel, dtype))
        if dtype != self.buffer.dtype or numel > self.buffer.numel():
            return None
        return self.buffer


@pytest.fixture
def slab() -> Iterator[Slab]:
    allocator = Slab(1024)
    previous = set_output_allocator(allocator)
    try:
        yield allocator
    finally:
        set_output_allocator(previous)


def test_ints_give_int64_and_bools_give_bool() -> None:
    assert default_collate([1, 2, 3]).dtype == torch.int64
    assert default_collate([True, False]).dtype == torch.bool
    assert default_collate([1.0, 2.0]).dtype == torch.float64
    assert default_collate([1, 2.5]).dtype == torch.get_default_dtype()


def test_int_batch_tensor_owns_independent_data() -> None:
    batch = [1, 2, 3]
    result = collate_int_fn(batch)
    result[0] = 100
    assert batch == [1, 2, 3]
    assert result.tolist() == [100, 2, 3]


def test_tensors_are_stacked_along_a_new_first_dimension() -> None:
    result = default_collate([torch.full((2, 3), float(i)) for i in range(4)])
    assert result.shape == (4, 2, 3)
    assert result[:, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_mismatched_sequences_raise_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        default_collate([[1, 2], [3]])


def test_empty_batch_raises_index_error() -> None:
    with pytest.raises(IndexError):
        default_collate([])


def test_unsupported_type_names_the_type() -> None:
    with pytest.raises(TypeError, match="found <class 'NoneType'>"):
        default_collate([None])


def test_string_arrays_are_rejected_with_their_dtype() -> None:
    with pytest.raises(TypeError, match="found <U1"):
        collate_numpy_array_fn([np.array(["a"])], collate_fn_map=default_collate_fn_map)


def test_strings_come_back_as_the_batch_itself() -> None:
    batch = ("a", "b")
    assert collate_str_fn(batch) is batch
    assert default_collate([("a", 1), ("b", 2)])[0] == ("a", "b")


def test_defaultdict_keeps_its_factory() -> None:
    batch: list[collections.defaultdict[str, Any]] = [
        collections.defaultdict(list, a=1),
        collections.defaultdict(list, a=2),
    ]
    result = default_collate(batch)
    assert isinstance(result, collections.defaultdict)
    assert result.default_factory is list
    assert result["a"].tolist() == [1, 2]


class Token:
    def __init__(self, text: str) -> None:
        self.text = text


class SpecialToken(Token):
    pass


def _join_tokens(batch: Sequence[Token], *, collate_fn_map: Any = None) -> str:
    return " ".join(token.text for token in batch)


def test_copied_registry_handles_a_custom_type_and_its_subclasses() -> None:
    registry = {**default_collate_fn_map, Token: _join_tokens}
    batch = [{"t": SpecialToken("a"), "n": 1}, {"t": SpecialToken("b"), "n": 2}]
    result = collate(batch, collate_fn_map=registry)
    assert result["t"] == "a b"
    assert result["n"].tolist() == [1, 2]
    assert Token not in default_collate_fn_map


def test_registry_extended_in_place_changes_default_collate() -> None:
    default_collate_fn_map[Token] = _join_tokens
    try:
        assert default_collate([Token("x"), Token("y")]) == "x y"
    finally:
        del default_collate_fn_map[Token]
    with pytest.raises(TypeError):
        default_collate([Token("x")])


def _say_object(batch: Sequence[Any], *, collate_fn_map: Any = None) -> str:
    return "object"


def test_exact_type_wins_over_an_earlier_superclass_key() -> None:
    registry: CollateFnMap = {object: _say_object, Token: _join_tokens}
    assert collate([Token("a")], collate_fn_map=registry) == "a"
    assert collate([SpecialToken("a")], collate_fn_map=registry) == "object"


def test_nested_and_sparse_tensors_are_refused() -> None:
    with pytest.raises(RuntimeError, match="sparse tensors"):
        collate_tensor_fn([torch.eye(2).to_sparse()])


def test_default_convert_turns_arrays_into_tensors_in_nested_structures() -> None:
    result = default_convert({"a": (np.arange(3), "s"), "b": np.float32(1.5)})
    assert isinstance(result["a"], list)
    assert torch.equal(result["a"][0], torch.arange(3))
    assert result["a"][1] == "s"
    assert result["b"].dtype == torch.float32


def test_no_allocator_is_installed_by_default() -> None:
    assert get_output_allocator() is None


def test_stack_into_writes_into_the_allocators_buffer(slab: Slab) -> None:
    tensors = [torch.full((2, 3), i, dtype=torch.uint8) for i in range(4)]
    result = default_collate(tensors)
    assert slab.requests == [(24, torch.uint8)]
    assert result.data_ptr() == slab.buffer.data_ptr()
    assert result.shape == (4, 2, 3)
    assert torch.equal(result, torch.stack(tensors))
    assert slab.buffer[:24].tolist() == torch.stack(tensors).flatten().tolist()


def test_numpy_arrays_are_also_stacked_into_the_buffer(slab: Slab) -> None:
    result = default_collate([np.full(4, i, dtype=np.uint8) for i in range(3)])
    assert result.data_ptr() == slab.buffer.data_ptr()
    assert result[:, 0].tolist() == [0, 1, 2]


def test_declined_request_falls_back_to_a_fresh_tensor(slab: Slab) -> None:
    tensors = [torch.ones(2, dtype=torch.float32)] * 2
    result = default_collate(tensors)
    assert slab.requests == [(4, torch.float32)]
    assert result.data_ptr() != slab.buffer.data_ptr()
    assert result.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_allocator_is_skipped_where_a_buffer_would_change_the_result(slab: Slab) -> None:
    mixed = [torch.zeros(2, dtype=torch.uint8), torch.ones(2, dtype=torch.int64)]
    assert default_collate(mixed).dtype == torch.int64
    grad = [torch.zeros(2, requires_grad=True), torch.zeros(2)]
    assert default_collate(grad).requires_grad
    empty = [torch.zeros(0, dtype=torch.uint8)] * 2
    assert default_collate(empty).shape == (2, 0)
    assert slab.requests == []


def test_mismatched_sizes_still_raise_with_an_allocator(slab: Slab) -> None:
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        default_collate([torch.zeros(2, dtype=torch.uint8), torch.zeros(3, dtype=torch.uint8)])


def test_wrong_buffer_from_allocator_is_reported() -> None:
    previous = set_output_allocator(lambda numel, dtype: torch.zeros(numel, dtype=torch.float64))
    try:
        with pytest.raises(ValueError, match="output allocator returned"):
            default_collate([torch.zeros(2)] * 2)
    finally:
        set_output_allocator(previous)


def test_set_output_allocator_returns_the_previous_one() -> None:
    first = Slab(8)
    assert set_output_allocator(first) is None
    try:
        assert set_output_allocator(None) is first
        assert get_output_allocator() is None
    finally:
        set_output_allocator(None)


def test_stack_into_uses_an_explicit_out() -> None:
    out = torch.empty(2, 2)
    result = stack_into([torch.ones(2), torch.zeros(2)], out=out)
    assert result.data_ptr() == out.data_ptr()
    assert out.tolist() == [[1.0, 1.0], [0.0, 0.0]]
