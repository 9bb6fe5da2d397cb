"""conveyor.transport.pinning: structure handling everywhere, real pinning where CUDA exists."""

from __future__ import annotations

import collections
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import pytest
import torch
import torch.utils.data as tud
from torch.utils.data._utils import pin_memory as torch_pinning

from conveyor.transport.pinning import (
    MPS_UNSUPPORTED_WARNING,
    NO_ACCELERATOR_WARNING,
    pin_memory,
    pin_memory_available,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs CUDA")


class Pinnable:
    """A custom batch type whose pin_memory() the recursion must call."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pinned = False

    def pin_memory(self) -> Pinnable:
        result = Pinnable(self.name)
        result.pinned = True
        return result


class Point(NamedTuple):
    x: Any
    y: Any


class TupleChild(tuple[Any, ...]):
    pass


class TaggedDict(dict[str, Any]):
    tag = "class"


class FrozenMapping(Mapping[str, Any]):
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class KeywordOnlyMapping(FrozenMapping):
    def __init__(self, *, data: dict[str, Any]) -> None:
        super().__init__(data)


class FrozenSequence(Sequence[Any]):
    def __init__(self, items: list[Any]) -> None:
        self._items = list(items)

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)


def _tagged(data: dict[str, Any]) -> TaggedDict:
    result = TaggedDict(data)
    result.tag = "instance"
    return result


def _pinnables(data: Any) -> list[Pinnable]:
    if isinstance(data, Pinnable):
        return [data]
    if isinstance(data, Mapping):
        return [found for value in data.values() for found in _pinnables(value)]
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        return [found for item in data for found in _pinnables(item)]
    return []


def test_custom_pin_memory_method_is_called_and_its_result_used() -> None:
    item = Pinnable("a")
    result = pin_memory(item)
    assert result is not item
    assert result.pinned
    assert not item.pinned


def test_strings_bytes_and_scalars_are_returned_untouched() -> None:
    for value in ("text", b"bytes", 3, 2.5, None):
        assert pin_memory(value) is value


STRUCTURES: dict[str, Any] = {
    "dict": {"a": Pinnable("a"), "s": "keep"},
    "ordered dict": collections.OrderedDict(b=Pinnable("b"), a=Pinnable("a")),
    "defaultdict": collections.defaultdict(list, a=Pinnable("a")),
    "dict subclass": _tagged({"a": Pinnable("a")}),
    "immutable mapping": FrozenMapping({"a": Pinnable("a")}),
    "unbuildable mapping": KeywordOnlyMapping(data={"a": Pinnable("a")}),
    "namedtuple": Point(Pinnable("x"), "label"),
    "tuple": (Pinnable("a"), "b", 1),
    "tuple subclass": TupleChild((Pinnable("a"), 2)),
    "list": [Pinnable("a"), ["nested", Pinnable("b")]],
    "immutable sequence": FrozenSequence([Pinnable("a")]),
    "range": range(3),
    "deep": {"x": [Point({"y": (Pinnable("deep"),)}, b"raw")]},
}


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_structure_is_preserved_as_torch_preserves_it(name: str) -> None:
    data = STRUCTURES[name]
    ours = pin_memory(data)
    theirs = torch_pinning.pin_memory(data)
    assert type(ours) is type(theirs)
    assert _shape(ours) == _shape(theirs)
    assert _shape(ours, typed=False) == _shape(data, typed=False)
    assert all(item.pinned for item in _pinnables(ours))
    assert not any(item.pinned for item in _pinnables(data))
    assert getattr(ours, "tag", None) == getattr(theirs, "tag", None)
    assert getattr(ours, "default_factory", None) == getattr(theirs, "default_factory", None)


def _shape(data: Any, typed: bool = True) -> Any:
    """Containers (with their types when ``typed``) and leaves; pinnables become their names."""
    if isinstance(data, Pinnable):
        return ("pinnable", data.name)
    if isinstance(data, Mapping):
        items = [(key, _shape(value, typed)) for key, value in data.items()]
        return (type(data) if typed else "mapping", items)
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        return (type(data) if typed else "sequence", [_shape(item, typed) for item in data])
    return data


def test_input_structure_is_not_modified() -> None:
    data = {"a": [Pinnable("a")], "b": collections.OrderedDict(c=Pinnable("c"))}
    pin_memory(data)
    assert not data["a"][0].pinned
    assert not data["b"]["c"].pinned


@pytest.mark.skipif(torch.accelerator.is_available(), reason="checks the CPU-only behaviour")
def test_pinning_a_tensor_without_accelerator_raises() -> None:
    with pytest.raises(RuntimeError):
        pin_memory({"t": torch.zeros(2)})


@needs_cuda
def test_tensors_are_pinned_in_place_of_the_originals() -> None:
    batch = {"x": torch.arange(4.0), "meta": (torch.ones(2, dtype=torch.int64), "id")}
    result = pin_memory(batch, "cuda")
    assert result["x"].is_pinned()
    assert result["meta"][0].is_pinned()
    assert not batch["x"].is_pinned()
    assert torch.equal(result["x"], batch["x"])
    assert result["meta"][1] == "id"


def test_availability_follows_the_accelerator() -> None:
    expected = torch.accelerator.is_available() and (
        torch.accelerator.current_accelerator() is None
        or torch.accelerator.current_accelerator().type != "mps"  # type: ignore[union-attr]
    )
    assert pin_memory_available("") == expected


@pytest.fixture
def fake_accelerator(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    kind = ["cuda"]
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device(kind[0]))
    yield kind


def test_availability_with_an_accelerator(fake_accelerator: list[str]) -> None:
    assert pin_memory_available("")
    assert pin_memory_available("cuda")
    assert pin_memory_available("cuda:1")
    assert not pin_memory_available("xpu")
    fake_accelerator[0] = "mps"
    assert not pin_memory_available("")


@pytest.mark.skipif(torch.accelerator.is_available(), reason="torch warns only without one")
def test_no_accelerator_warning_is_torchs_text() -> None:
    loader = tud.DataLoader(list(range(4)), batch_size=2, pin_memory=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        iter(loader)
    assert [str(w.message) for w in caught] == [NO_ACCELERATOR_WARNING]
    assert not pin_memory_available("")


def test_mps_warning_is_torchs_text(fake_accelerator: list[str]) -> None:
    fake_accelerator[0] = "mps"
    loader = tud.DataLoader(list(range(4)), batch_size=2, pin_memory=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        iter(loader)
    assert [str(w.message) for w in caught] == [MPS_UNSUPPORTED_WARNING]
    assert not pin_memory_available("")
