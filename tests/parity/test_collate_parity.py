"""conveyor.collate against torch.utils.data on the same input: values, dtypes, types, errors."""

from __future__ import annotations

import collections
import datetime
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data._utils import collate as torch_collate_module

from conveyor import collate as cc

Point = collections.namedtuple("Point", ["x", "y"])


class Pair(NamedTuple):
    left: Any
    right: Any


class FrozenMapping(Mapping[str, Any]):
    """Immutable mapping built from a dict: rebuilt with its own type."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FrozenMapping) and self._data == other._data

    __hash__ = None  # type: ignore[assignment]


class KeywordOnlyMapping(FrozenMapping):
    """Cannot be built from a dict: torch falls back to a plain dict."""

    def __init__(self, *, data: dict[str, Any]) -> None:
        super().__init__(data)


class TaggedDict(dict[str, Any]):
    """A mutable mapping with an attribute that must survive collation (copy + update)."""

    tag = "class"


class TaggedList(list[Any]):
    tag = "class"


class FrozenSequence(Sequence[Any]):
    def __init__(self, items: list[Any]) -> None:
        self._items = list(items)

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)


class UnbuildableSequence(FrozenSequence):
    def __init__(self, *items: Any) -> None:
        super().__init__(list(items))


class PlainTuple(tuple[Any, ...]):
    pass


class Custom:
    def __init__(self, value: int) -> None:
        self.value = value


class CustomChild(Custom):
    pass


def _tagged(items: dict[str, Any], tag: str) -> TaggedDict:
    result = TaggedDict(items)
    result.tag = tag
    return result


def _tagged_list(items: list[Any], tag: str) -> TaggedList:
    result = TaggedList(items)
    result.tag = tag
    return result


def _defaultdict(items: dict[str, Any]) -> collections.defaultdict[str, Any]:
    return collections.defaultdict(list, items)


def assert_same(actual: Any, expected: Any, path: str = "batch") -> None:
    """Recursively equal, with identical container types, tensor dtypes, shapes and values."""
    assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype, f"{path}: {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: {actual.shape} != {expected.shape}"
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    elif isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype
        np.testing.assert_array_equal(actual, expected)
    elif isinstance(expected, Mapping):
        assert list(actual) == list(expected), f"{path}: keys differ"
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}[{key!r}]")
        assert getattr(actual, "tag", None) == getattr(expected, "tag", None)
        assert getattr(actual, "default_factory", None) == getattr(
            expected, "default_factory", None
        )
    elif isinstance(expected, Sequence) and not isinstance(expected, str | bytes | range):
        assert len(actual) == len(expected), f"{path}: lengths differ"
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{path}[{index}]")
        assert getattr(actual, "tag", None) == getattr(expected, "tag", None)
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def assert_parity(ours: Callable[[Any], Any], theirs: Callable[[Any], Any], data: Any) -> None:
    """Both give the same result, or both raise the same exception type and message."""
    try:
        expected = theirs(data)
    except Exception as error:  # any exception torch raises is the oracle
        with pytest.raises(type(error)) as raised:
            ours(data)
        assert str(raised.value) == str(error)
        return
    assert_same(ours(data), expected)


def _tensor(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=generator) * 100).to(dtype)


NUMPY_SCALAR_TYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
]

TENSOR_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.int8,
    torch.bool,
    torch.complex64,
]

COLLATE_BATCHES: dict[str, list[Any]] = {
    "ints": [0, 1, -5, 2**40],
    "bools": [True, False, True],
    "bool then int": [True, 3],
    "int then bool": [3, True],
    "floats": [0.5, -1.25, float("inf"), float("nan")],
    "int then float": [1, 2.5],
    "float then int": [2.5, 1],
    "int then numpy float": [1, np.float32(2.5)],
    "int then numpy int": [1, np.int8(3)],
    "int too large": [1, 2**64],
    "int then str": [1, "2"],
    "int then list": [1, [2]],
    "float then none": [1.5, None],
    "float then huge int": [1.5, 2**70],
    "strs": ["a", "bc", ""],
    "bytes": [b"a", b"bc"],
    "numpy strs": [np.str_("a"), np.str_("b")],
    "numpy bytes": [np.bytes_(b"a"), np.bytes_(b"b")],
    "none": [None, None],
    "objects": [Custom(1), Custom(2)],
    "int arrays": [np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((2, 3), np.int32)],
    "float arrays": [np.linspace(0, 1, 4), np.zeros(4)],
    "bool arrays": [np.array([True, False]), np.array([False, False])],
    "0-d arrays": [np.array(1.5), np.array(2.5)],
    "str arrays": [np.array(["a", "b"]), np.array(["c", "d"])],
    "bytes arrays": [np.array([b"a"]), np.array([b"c"])],
    "object arrays": [np.array([1, None], dtype=object), np.array([2, 3], dtype=object)],
    "datetime64[s] arrays": [np.array(["2020-01-01"], dtype="datetime64[s]")] * 2,
    "datetime64[as] arrays": [np.array([1], dtype="datetime64[as]")] * 2,
    "array subclass": [np.arange(3).view(np.recarray), np.arange(3).view(np.recarray)],
    "mismatched arrays": [np.zeros(2), np.zeros(3)],
    "0-d tensors": [torch.tensor(1.0), torch.tensor(2.0)],
    "mismatched tensors": [torch.zeros(2), torch.zeros(3)],
    "mixed dtype tensors": [torch.zeros(2, dtype=torch.int64), torch.ones(2)],
    "dicts": [{"a": 1, "b": 2.0, "c": "x"}, {"a": 3, "b": 4.0, "c": "y"}],
    "nested dicts": [
        {"img": _tensor(2, 2), "meta": {"id": 1, "names": ["a", "b"]}},
        {"img": _tensor(2, 2, seed=1), "meta": {"id": 2, "names": ["c", "d"]}},
    ],
    "dict missing key": [{"a": 1, "b": 2}, {"a": 1}],
    "ordered dicts": [collections.OrderedDict(b=1, a=2), collections.OrderedDict(b=3, a=4)],
    "defaultdicts": [_defaultdict({"a": 1}), _defaultdict({"a": 2})],
    "dict subclass with attribute": [_tagged({"a": 1}, "first"), _tagged({"a": 2}, "second")],
    "immutable mapping": [FrozenMapping({"a": 1}), FrozenMapping({"a": 2})],
    "unbuildable mapping": [KeywordOnlyMapping(data={"a": 1}), KeywordOnlyMapping(data={"a": 2})],
    "dict with bad value": [{"a": object()}, {"a": object()}],
    "namedtuples": [Point(1, 2.0), Point(3, 4.0)],
    "typed namedtuples": [Pair("a", _tensor(3)), Pair("b", _tensor(3, seed=2))],
    "tuples": [(1, 2.0), (3, 4.0)],
    "tuples with strs": [("a", 1), ("b", 2)],
    "tuple subclass": [PlainTuple((1, 2)), PlainTuple((3, 4))],
    "lists": [[1, 2], [3, 4]],
    "lists of strs": [["a", "b"], ["c", "d"]],
    "list subclass with attribute": [_tagged_list([1, 2], "first"), _tagged_list([3, 4], "x")],
    "immutable sequence": [FrozenSequence([1, 2]), FrozenSequence([3, 4])],
    "unbuildable sequence": [UnbuildableSequence(1, 2), UnbuildableSequence(3, 4)],
    "ranges": [range(3), range(3)],
    "mismatched lists": [[1, 2], [3]],
    "mismatched second": [[1, 2], [3, 4], [5]],
    "list then int": [[1, 2], 3],
    "deep mix": [
        {"x": [(np.float32(1), "s", b"b"), {"k": np.arange(2)}], "y": Point(True, [1.0])},
        {"x": [(np.float32(2), "t", b"c"), {"k": np.arange(2)}], "y": Point(False, [2.0])},
    ],
    "empty": [],
}
with warnings.catch_warnings():  # prototype/beta layouts warn when built
    warnings.simplefilter("ignore")
    COLLATE_BATCHES["nested tensors"] = [
        torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)], layout=torch.jagged)
    ] * 2
    COLLATE_BATCHES["strided nested tensors"] = [
        torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    ] * 2
    COLLATE_BATCHES["sparse coo"] = [torch.eye(2).to_sparse()] * 2
    COLLATE_BATCHES["sparse csr"] = [torch.eye(2).to_sparse_csr()] * 2
    COLLATE_BATCHES["sparse csc"] = [torch.eye(2).to_sparse_csc()] * 2
COLLATE_BATCHES.update(
    {f"numpy {t.__name__} scalars": [t(1), t(0), t(3)] for t in NUMPY_SCALAR_TYPES}
)
COLLATE_BATCHES.update(
    {f"{d} tensors": [_tensor(2, 3, dtype=d, seed=i) for i in range(3)] for d in TENSOR_DTYPES}
)


@pytest.mark.parametrize("name", list(COLLATE_BATCHES))
def test_default_collate_matches_torch(name: str) -> None:
    assert_parity(cc.default_collate, tud.default_collate, COLLATE_BATCHES[name])


def test_default_collate_of_a_tuple_batch_matches_torch() -> None:
    batch = (("a", 1), ("b", 2))
    assert_parity(cc.default_collate, tud.default_collate, batch)
    assert_parity(cc.default_collate, tud.default_collate, ("a", "b"))


def test_default_collate_of_memmaps_matches_torch(tmp_path: Any) -> None:
    arrays = []
    for index in range(2):
        array = np.memmap(tmp_path / f"{index}.bin", dtype=np.float32, mode="w+", shape=(3,))
        array[:] = index
        arrays.append(array)
    assert_parity(cc.default_collate, tud.default_collate, arrays)


def test_registry_has_torchs_keys_in_torchs_order() -> None:
    assert list(cc.default_collate_fn_map) == list(torch_collate_module.default_collate_fn_map)


def _collate_custom(batch: Sequence[Custom], *, collate_fn_map: Any = None) -> Any:
    return ("custom", [item.value for item in batch])


def _collate_anything(batch: Sequence[Any], *, collate_fn_map: Any = None) -> Any:
    return "anything"


CUSTOM_MAPS: dict[str, tuple[Callable[[Any], dict[Any, Any]], list[Any]]] = {
    "custom type": (lambda base: {**base, Custom: _collate_custom}, [Custom(1), Custom(2)]),
    "subclass of custom type": (
        lambda base: {**base, Custom: _collate_custom},
        [CustomChild(1), CustomChild(2)],
    ),
    "custom type nested": (
        lambda base: {**base, Custom: _collate_custom},
        [{"c": Custom(1), "n": [1]}, {"c": Custom(2), "n": [2]}],
    ),
    "tuple key": (lambda base: {(str, Custom): _collate_custom}, [Custom(3)]),
    "exact type beats earlier superclass": (
        lambda base: {object: _collate_anything, Custom: _collate_custom},
        [Custom(1)],
    ),
    "first matching superclass wins": (
        lambda base: {object: _collate_anything, Custom: _collate_custom},
        [CustomChild(1)],
    ),
    "dict overridden": (lambda base: {**base, dict: _collate_anything}, [{"a": 1}]),
    "map without tensors": (lambda base: {int: base[int]}, [torch.zeros(2)]),
    "map without str": (lambda base: {int: base[int]}, [{"a": 1}, {"a": 2}]),
    "empty map": (lambda base: {}, [1, 2]),
}


@pytest.mark.parametrize("name", list(CUSTOM_MAPS))
def test_collate_with_custom_map_matches_torch(name: str) -> None:
    make_map, batch = CUSTOM_MAPS[name]
    ours = make_map(cc.default_collate_fn_map)
    theirs = make_map(torch_collate_module.default_collate_fn_map)
    assert_parity(
        lambda b: cc.collate(b, collate_fn_map=ours),
        lambda b: torch_collate_module.collate(b, collate_fn_map=theirs),
        batch,
    )


def test_collate_without_map_matches_torch() -> None:
    for batch in ([{"a": [1]}], [1]):
        assert_parity(
            lambda b: cc.collate(b, collate_fn_map=None),
            lambda b: torch_collate_module.collate(b, collate_fn_map=None),
            batch,
        )


CONVERT_INPUTS: dict[str, Any] = {
    "int": 3,
    "float": 2.5,
    "str": "abc",
    "bytes": b"abc",
    "none": None,
    "tensor": _tensor(2),
    "int array": np.arange(4),
    "float32 array": np.ones((2, 2), dtype=np.float32),
    "0-d array": np.array(7),
    "str array": np.array(["a", "b"]),
    "object array": np.array([1, None], dtype=object),
    "memmap-like subclass": np.arange(3).view(np.recarray),
    "numpy scalars": [t(1) for t in NUMPY_SCALAR_TYPES],
    "numpy str": np.str_("x"),
    "numpy bytes": np.bytes_(b"x"),
    "numpy datetime": np.datetime64("2020-01-01"),
    "dict": {"a": np.arange(2), "b": "s"},
    "ordered dict": collections.OrderedDict(b=np.int64(1), a=[np.float32(2)]),
    "defaultdict": _defaultdict({"a": np.arange(2)}),
    "dict subclass": _tagged({"a": np.arange(2)}, "mine"),
    "immutable mapping": FrozenMapping({"a": np.arange(2)}),
    "unbuildable mapping": KeywordOnlyMapping(data={"a": np.arange(2)}),
    "namedtuple": Point(np.array(0), np.array([1.0])),
    "typed namedtuple": Pair("a", np.arange(2)),
    "tuple": (np.arange(2), 1),
    "tuple subclass": PlainTuple((np.arange(2), 1)),
    "list": [np.arange(2), [np.float64(1.5), "x"]],
    "list subclass": _tagged_list([np.arange(2)], "mine"),
    "immutable sequence": FrozenSequence([np.arange(2)]),
    "unbuildable sequence": UnbuildableSequence(np.arange(2)),
    "range": range(3),
    "bytearray": bytearray(b"ab"),
    "object": datetime.date(2020, 1, 1),
}


@pytest.mark.parametrize("name", list(CONVERT_INPUTS))
def test_default_convert_matches_torch(name: str) -> None:
    assert_parity(cc.default_convert, tud.default_convert, CONVERT_INPUTS[name])


def test_default_convert_returns_unconvertible_arrays_themselves() -> None:
    for array in (np.array(["a"]), np.array([None], dtype=object)):
        assert cc.default_convert(array) is array
        assert tud.default_convert(array) is array


_number = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-100, max_value=100).map(np.int16),
    st.integers(min_value=0, max_value=255).map(np.uint8),
    st.floats(width=32).map(np.float32),
    st.booleans().map(np.bool_),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_number, min_size=1, max_size=8))
def test_number_batches_match_torch(batch: list[Any]) -> None:
    assert_parity(cc.default_collate, tud.default_collate, batch)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"i": st.integers(-1000, 1000), "f": st.floats(-1e6, 1e6), "s": st.text(max_size=3)}
        ),
        min_size=1,
        max_size=6,
    )
)
def test_dict_batches_match_torch(batch: list[dict[str, Any]]) -> None:
    assert_parity(cc.default_collate, tud.default_collate, batch)
