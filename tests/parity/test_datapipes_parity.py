"""conveyor's DataPipes against torch's on the same inputs (torch is the oracle)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils.data.datapipes.iter as tdi
import torch.utils.data.datapipes.map as tdm
from torch.utils.data import graph_settings as torch_settings

from conveyor import graph_settings
from conveyor.datapipes import iter as cdi
from conveyor.datapipes import map as cdm


def double(x: int) -> int:
    return 2 * x


def add(a: int, b: int) -> int:
    return a + b


def is_even(x: int) -> bool:
    return x % 2 == 0


def mod3(x: int) -> int:
    return x % 3


def first_char(s: str) -> str:
    return s[0]


def odd_or_none(x: int) -> int | None:
    return None if x == 3 else x % 2


def identity(x: int) -> int:
    return x


def always_none(x: int) -> None:
    return None


def not_bool(x: int) -> int:
    return 1


Source = Callable[[], Any]


def both(build: Callable[[Source], Any], data: Any) -> tuple[list[Any], list[Any]]:
    """Run ``build`` with torch's and conveyor's wrappers of ``data``; return both outputs.

    ``build`` gets a factory of fresh sources, so no pipe is read by two consumers.
    """
    ours = list(build(lambda: cdi.IterableWrapper(data)))
    theirs = list(build(lambda: tdi.IterableWrapper(data)))
    return ours, theirs


CASES: dict[str, tuple[Callable[[Source], Any], Any]] = {
    "map": (lambda src: src().map(double), range(10)),
    "map/input_col": (lambda src: src().map(double, input_col=1), [(i, i + 1) for i in range(5)]),
    "map/output_col": (
        lambda src: src().map(double, input_col=0, output_col=-1),
        [[i, 0] for i in range(5)],
    ),
    "map/multi_col": (
        lambda src: src().map(add, input_col=[0, 2]),
        [(i, "x", i * 3) for i in range(4)],
    ),
    "map/dict": (
        lambda src: src().map(double, input_col="a", output_col="b"),
        [{"a": i} for i in range(4)],
    ),
    "filter": (lambda src: src().filter(is_even), range(11)),
    "filter/input_col": (
        lambda src: src().filter(is_even, input_col=1),
        [(i, i * 3) for i in range(6)],
    ),
    "batch": (lambda src: src().batch(3), range(10)),
    "batch/drop_last": (lambda src: src().batch(3, drop_last=True), range(10)),
    "unbatch": (lambda src: src().unbatch(), [[[0, 1], [2]], [[3, 4], [5]], [[6]]]),
    "unbatch/2": (
        lambda src: src().unbatch(unbatch_level=2),
        [[[0, 1], [2]], [[3, 4], [5]], [[6]]],
    ),
    "unbatch/-1": (lambda src: src().unbatch(unbatch_level=-1), [[[0, [1]], [2]], [[3]], 4]),
    "collate": (lambda src: src().batch(4).collate(), range(10)),
    "collate/fn": (lambda src: src().batch(3).collate(collate_fn=sum), range(9)),
    "concat": (lambda src: src().concat(src().map(double)), range(4)),
    "zip": (lambda src: src().zip(src().map(double).filter(is_even)), range(6)),
    "mux": (lambda src: src().mux(src().filter(is_even), src().map(double)), range(7)),
    "fork/zip": (lambda src: _zip_all(src().fork(3)), range(6)),
    "fork/deep": (lambda src: _zip_all(src().fork(2, copy="deep")), [[i] for i in range(4)]),
    "demux": (lambda src: _concat_all(src().demux(3, mod3)), range(12)),
    "demux/drop_none": (
        lambda src: _concat_all(src().demux(2, odd_or_none, drop_none=True)),
        range(8),
    ),
    "groupby": (lambda src: src().groupby(first_char), ["a1", "b1", "a2", "c1", "b2", "a3"]),
    "groupby/keep_key": (lambda src: src().groupby(first_char, keep_key=True), ["a1", "b1", "a2"]),
    "groupby/group_size": (
        lambda src: src().groupby(first_char, group_size=2),
        ["a.png", "b.png", "a.json", "b.json", "a.jpg", "c.json"],
    ),
    "groupby/guaranteed": (
        lambda src: src().groupby(first_char, buffer_size=3, group_size=3, guaranteed_group_size=2),
        ["a.png", "b.png", "a.json", "b.json", "a.jpg", "c.json"],
    ),
    "groupby/drop_remaining": (
        lambda src: src().groupby(mod3, buffer_size=4, group_size=3, drop_remaining=True),
        range(30),
    ),
    "shuffle/disabled": (lambda src: src().shuffle().set_shuffle(False), range(8)),
}


def _zip_all(dps: list[Any]) -> Any:
    return dps[0].zip(*dps[1:])


def _concat_all(dps: list[Any]) -> Any:
    return dps[0].concat(*dps[1:])


def _normalize(item: Any) -> Any:
    if isinstance(item, torch.Tensor):
        return ("tensor", item.dtype, item.tolist())
    if isinstance(item, tuple | list):
        return type(item).__name__, [_normalize(x) for x in item]
    return item


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_output_as_torch(name: str) -> None:
    build, data = CASES[name]
    ours, theirs = both(build, data)
    assert [_normalize(x) for x in ours] == [_normalize(x) for x in theirs]


@pytest.mark.parametrize(
    "build",
    [
        lambda dp: dp.groupby(mod3, buffer_size=4, group_size=3),
        lambda dp: _zip_all(dp.fork(2, buffer_size=3)),
        lambda dp: dp.fork(2, buffer_size=3)[0],
        lambda dp: dp.demux(2, is_even, buffer_size=2)[0],
        lambda dp: dp.demux(2, identity)[0],
        lambda dp: dp.demux(2, always_none)[0],
        lambda dp: dp.unbatch(unbatch_level=3),
        lambda dp: dp.filter(not_bool),
    ],
    ids=[
        "groupby-fail",
        "fork-zip-ok",
        "fork-overflow",
        "demux-overflow",
        "demux-range",
        "demux-none",
        "unbatch-depth",
        "filter-non-bool",
    ],
)
def test_same_errors_as_torch(build: Callable[[Any], Any]) -> None:
    data = range(10)
    outcomes = []
    for wrapper in (cdi.IterableWrapper, tdi.IterableWrapper):
        try:
            outcomes.append(("ok", list(build(wrapper(data)))))
        except Exception as exc:
            outcomes.append(("error", type(exc)))
    assert outcomes[0] == outcomes[1]


def test_same_lengths_as_torch() -> None:
    for build in (
        lambda src: src().map(double),
        lambda src: src().batch(3),
        lambda src: src().batch(3, drop_last=True),
        lambda src: src().concat(src()),
        lambda src: src().zip(src().batch(2)),
        lambda src: src().mux(src().batch(4)),
        lambda src: src().shuffle(),
        lambda src: src().fork(2)[1],
        lambda src: src().sharding_filter(),
    ):
        ours = build(lambda: cdi.IterableWrapper(range(10)))
        theirs = build(lambda: tdi.IterableWrapper(range(10)))
        assert len(ours) == len(theirs)


@pytest.mark.parametrize("groups", [[(4, 1, 1)], [(2, 1, 2), (3, 2, 3)], [(3, 0, 3), (2, 1, 2)]])
def test_sharding_matches_torch(groups: list[tuple[int, int, int]]) -> None:
    outputs = []
    for wrapper, settings in (
        (cdi.IterableWrapper, graph_settings),
        (tdi.IterableWrapper, torch_settings),
    ):
        dp = wrapper(range(40)).map(double).sharding_filter()
        for n, i, group in groups:
            settings.apply_sharding(dp, n, i, group)
        outputs.append((list(dp), len(dp)))
    assert outputs[0] == outputs[1]


def test_sharding_priorities_interchange_with_torch() -> None:
    from torch.utils.data.datapipes.iter.sharding import SHARDING_PRIORITIES as TorchPriorities

    dp = cdi.IterableWrapper(range(12)).sharding_filter()
    graph_settings.apply_sharding(dp, 2, 1, TorchPriorities.DISTRIBUTED)
    graph_settings.apply_sharding(dp, 3, 2, cdi.SHARDING_PRIORITIES.MULTIPROCESSING)
    assert list(dp) == [i for i in range(12) if i % 6 == 1 * 3 + 2]


def test_random_seeds_drawn_like_torch() -> None:
    ours = cdi.IterableWrapper(range(5)).shuffle().map(double).shuffle()
    theirs = tdi.IterableWrapper(range(5)).shuffle().map(double).shuffle()
    graph_settings.apply_random_seed(ours, torch.Generator().manual_seed(3))
    torch_settings.apply_random_seed(theirs, torch.Generator().manual_seed(3))
    assert ours._seed == theirs._seed
    assert ours.datapipe.datapipe._seed == theirs.datapipe.datapipe._seed


def test_map_style_same_as_torch() -> None:
    for build in (
        lambda dp: dp.map(double),
        lambda dp: dp.batch(3),
        lambda dp: dp.batch(3, drop_last=True),
        lambda dp: dp.concat(dp.map(double)),  # map-style pipes may be shared
        lambda dp: dp.zip(dp.map(double)),
    ):
        ours, theirs = build(cdm.SequenceWrapper(range(7))), build(tdm.SequenceWrapper(range(7)))
        assert len(ours) == len(theirs)
        assert [ours[i] for i in range(len(ours))] == [theirs[i] for i in range(len(theirs))]


def test_unbounded_fork_warns_like_torch() -> None:
    for wrapper in (cdi.IterableWrapper, tdi.IterableWrapper):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            wrapper(range(3)).fork(2, buffer_size=-1)
        assert any(issubclass(w.category, UserWarning) for w in caught)


@pytest.mark.parametrize("library", ["torch", "conveyor"])
def test_a_pipe_handing_out_one_shared_iterator_continues_it_on_every_iter(library: str) -> None:
    """torch's test_iterdatapipe_singleton_new_object: ``__iter__`` returns the same
    iterator each time (over a whole pipeline here). A second ``iter()`` while the first is
    alive continues it and invalidates the first; it is never silently empty."""
    lib = tdi if library == "torch" else cdi
    base = torch.utils.data.IterDataPipe if library == "torch" else cdi.IterDataPipe

    class SharedIterator(base):  # type: ignore[misc, valid-type]
        def __init__(self, iterable: Any) -> None:
            self.iterable = iter(iterable)

        def __iter__(self) -> Any:
            return self.iterable

    source = SharedIterator(lib.IterableWrapper(range(10)).map(identity).filter(is_even))
    first = iter(source)
    assert next(first) == 0
    second = iter(source)
    assert next(second) == 2
    with pytest.raises(RuntimeError, match="This iterator has been invalidated"):
        next(first)
    assert list(second) == [4, 6, 8]
