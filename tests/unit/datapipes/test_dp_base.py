"""The DataPipe protocol: laziness, non-blocking next, iterators, registry, subclasses."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.datapipes import DataChunk, IterDataPipe, MapDataPipe, NotAvailable
from conveyor.datapipes.base import Cursor, StateDict
from conveyor.datapipes.iter import IterableWrapper, Mapper
from conveyor.dataset import Dataset, IterableDataset


class Counting(IterDataPipe[int]):
    """A torch-style source that records how many items were produced."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.produced = 0
        self.resets = 0

    def reset(self) -> None:
        super().reset()
        self.resets += 1

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            self.produced += 1
            yield i


class Flaky(IterDataPipe[int]):
    """An RFC-style pipe: only ``nonblocking_next``, not ready every other call."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0
        self.i = 0

    def nonblocking_next(self) -> int:
        self.calls += 1
        if self.calls % 2:
            raise NotAvailable()
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i - 1


class Later(IterDataPipe[int]):
    """A step-style node that is not ready on the first try of every item."""

    def __init__(self, n: int) -> None:
        self.n = n

    def _make_cursor(self, state: StateDict | None) -> Cursor[int]:
        return _LaterCursor(self.n)


class _LaterCursor(Cursor[int]):
    def __init__(self, n: int) -> None:
        self.n, self.i, self.ready = n, 0, False

    def next(self) -> int:
        if self.i >= self.n:
            raise StopIteration
        if not self.ready:
            self.ready = True
            raise NotAvailable()
        self.ready = False
        self.i += 1
        return self.i - 1

    def state(self) -> StateDict:
        return {"version": 1}


def test_classes_extend_the_dataset_bases() -> None:
    assert issubclass(IterDataPipe, IterableDataset)
    assert issubclass(MapDataPipe, Dataset)


def test_building_and_iter_do_no_work() -> None:
    src = Counting(5)
    dp = src.map(lambda x: x + 1).filter(lambda x: x > 0).batch(2).shuffle()
    it = iter(dp)
    assert src.produced == 0
    assert next(it) is not None
    assert src.produced > 0


def test_iteration_is_repeatable_and_resets_inputs() -> None:
    src = Counting(4)
    dp = src.map(lambda x: x * 10)
    assert list(dp) == [0, 10, 20, 30]
    assert list(dp) == [0, 10, 20, 30]
    assert src.resets == 2


def test_nonblocking_next_passes_not_available_through_nodes() -> None:
    dp = Later(3).map(lambda x: x + 100)
    seen: list[int] = []
    not_ready = 0
    while True:
        try:
            seen.append(dp.nonblocking_next())
        except NotAvailable:
            not_ready += 1
        except StopIteration:
            break
    assert seen == [100, 101, 102]
    assert not_ready == 3


def test_blocking_iterator_waits_through_not_available() -> None:
    assert list(Later(4).batch(2)) == [[0, 1], [2, 3]]
    assert list(Flaky(3)) == [0, 1, 2]


def test_second_iterator_invalidates_first() -> None:
    dp = IterableWrapper(range(5))
    first = iter(dp)
    assert next(first) == 0
    second = iter(dp)
    assert next(second) == 0
    with pytest.raises(RuntimeError, match="invalidated"):
        next(first)


def test_reset_starts_a_new_epoch() -> None:
    dp = IterableWrapper(range(3)).map(lambda x: x)
    assert dp.nonblocking_next() == 0
    assert dp.nonblocking_next() == 1
    dp.reset()
    assert dp.nonblocking_next() == 0


def test_state_survives_dropping_the_iterator() -> None:
    dp = IterableWrapper(range(6)).batch(2)
    for batch in dp:
        if batch == [2, 3]:
            break
    state = dp.state_dict()
    resumed = IterableWrapper(range(6)).batch(2)
    resumed.load_state_dict(state)
    assert list(resumed) == [[4, 5]]
    assert list(dp) == [[0, 1], [2, 3], [4, 5]]  # a new iter() is a new epoch


def test_torch_style_subclass_inside_nodes_and_state() -> None:
    dp = Counting(6).map(lambda x: -x)
    it = iter(dp)
    assert [next(it), next(it)] == [0, -1]
    state = dp.state_dict()
    resumed = Counting(6).map(lambda x: -x)
    resumed.load_state_dict(state)
    assert list(resumed) == [-2, -3, -4, -5]


def test_subclass_without_iteration_says_what_to_implement() -> None:
    class Empty(IterDataPipe[int]):
        pass

    with pytest.raises(NotImplementedError, match="__iter__"):
        list(Empty())


def test_pickle_and_copy_carry_the_definition_only() -> None:
    dp = IterableWrapper(range(4)).batch(2)
    it = iter(dp)
    next(it)
    for clone in (pickle.loads(pickle.dumps(dp)), copy.deepcopy(dp)):
        assert clone._cursor is None
        assert list(clone) == [[0, 1], [2, 3]]


def test_registry_adds_functional_names_like_torch() -> None:
    class Negate(IterDataPipe[int]):
        def __init__(self, source: IterDataPipe[int], scale: int = 1) -> None:
            self.source = source
            self.scale = scale

        def __iter__(self) -> Iterator[int]:
            for x in self.source:
                yield -x * self.scale

    name = "negate_for_test"
    IterDataPipe.register_datapipe_as_function(name, Negate)
    try:
        dp: Any = IterableWrapper(range(3))
        assert list(getattr(dp, name)(scale=2)) == [0, -2, -4]
        with pytest.raises(Exception, match="already taken"):
            IterDataPipe.register_datapipe_as_function(name, Negate)
        with pytest.raises(Exception, match="already taken"):
            IterDataPipe.register_datapipe_as_function("map", Negate)
        assert list(IterableWrapper(range(2)).pipe(Negate, 3)) == [0, -3]
    finally:
        del IterDataPipe.functions[name]
    with pytest.raises(AttributeError):
        getattr(IterableWrapper(range(1)), name)


def test_register_function_and_map_registry() -> None:
    MapDataPipe.register_function("first_for_test", lambda dp: dp[0])
    try:
        from conveyor.datapipes.map import SequenceWrapper

        seq: Any = SequenceWrapper([7, 8])
        assert seq.first_for_test() == 7
    finally:
        del MapDataPipe.functions["first_for_test"]


def test_datachunk_is_a_list() -> None:
    chunk = DataChunk([1, 2, 3])
    assert chunk == [1, 2, 3]
    assert chunk.items == [1, 2, 3]
    assert chunk.as_str("  ") == "  [1, 2, 3]"
    assert list(chunk.raw_iterator()) == [1, 2, 3]


def test_not_available_without_bell_backs_off() -> None:
    pending = NotAvailable()
    assert not pending.changed()
    pending.wait(timeout=0.001)


def test_plain_iterable_inputs_are_refused_with_a_hint() -> None:
    with pytest.raises(TypeError, match="IterableWrapper"):
        Mapper([1, 2, 3], lambda x: x)  # type: ignore[arg-type]


def test_repr_is_the_class_name() -> None:
    assert repr(IterableWrapper([1])) == "IterableWrapper"


def test_functional_datapipe_decorator() -> None:
    from conveyor.datapipes import functional_datapipe

    @functional_datapipe("halve_for_test")
    class Halve(IterDataPipe[float]):
        def __init__(self, source: IterDataPipe[int]) -> None:
            self.source = source

        def __iter__(self) -> Iterator[float]:
            return (x / 2 for x in self.source)

    try:
        dp: Any = IterableWrapper([2, 4])
        assert list(dp.halve_for_test()) == [1.0, 2.0]
    finally:
        del IterDataPipe.functions["halve_for_test"]
    with pytest.raises(TypeError, match="only decorate"):
        functional_datapipe("nope")(int)
