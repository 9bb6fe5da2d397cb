"""Graph walking and graph-wide settings (sharding, shuffle switch, seeds)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch

from conveyor.datapipes import IterDataPipe
from conveyor.datapipes.iter import SHARDING_PRIORITIES, IterableWrapper, Shuffler
from conveyor.datapipes.map import SequenceWrapper
from conveyor.graph import list_dps, traverse_dps
from conveyor.graph_settings import (
    apply_random_seed,
    apply_sharding,
    apply_shuffle_settings,
    get_all_graph_pipes,
)


def test_traverse_has_torch_shape() -> None:
    src = IterableWrapper(range(4))
    mapped = src.map(abs)
    out = mapped.batch(2)
    assert traverse_dps(out) == {id(out): (out, {id(mapped): (mapped, {id(src): (src, {})})})}


def test_traverse_fork_and_zip_reaches_the_source_along_each_path() -> None:
    src = IterableWrapper(range(4))
    a, b = src.fork(2)
    zipped = a.zip(b)
    graph = traverse_dps(zipped)
    ((root, inputs),) = graph.values()
    assert root is zipped
    assert [dp for dp, _ in inputs.values()] == [a, b]
    pipes = list_dps(graph)
    assert pipes.count(src) == 1
    assert {type(p).__name__ for p in pipes} == {"Zipper", "Branch", "Forker", "IterableWrapper"}
    assert list_dps(graph, exclude_dps=[a]) == [zipped, b, b.splitter, src]


def test_traverse_refuses_non_datapipes() -> None:
    with pytest.raises(RuntimeError, match="Expected `IterDataPipe` or `MapDataPipe`"):
        traverse_dps([1, 2])  # type: ignore[arg-type]


def test_traverse_finds_inputs_of_user_subclasses() -> None:
    class Pair(IterDataPipe[int]):
        def __init__(self, dps: list[IterDataPipe[int]]) -> None:
            self.inputs = {"all": dps}

        def __iter__(self) -> Iterator[int]:
            for dp in self.inputs["all"]:
                yield from dp

    x, y = IterableWrapper([1]), IterableWrapper([2])
    pair = Pair([x, y])
    assert list_dps(traverse_dps(pair)) == [pair, x, y]
    assert list(pair) == [1, 2]


def test_traverse_map_to_iter_and_back() -> None:
    seq = SequenceWrapper(range(3))
    it = seq.map(abs).to_iter()
    assert len(get_all_graph_pipes(traverse_dps(it))) == 3


def test_apply_sharding_sets_every_branch() -> None:
    left = IterableWrapper(range(10)).sharding_filter()
    right = IterableWrapper(range(10, 20)).sharding_filter()
    zipped = left.zip(right)
    assert apply_sharding(zipped, 3, 2) is zipped
    assert list(zipped) == [(2, 12), (5, 15), (8, 18)]


def test_apply_sharding_twice_on_a_branch_fails() -> None:
    dp = IterableWrapper(range(10)).sharding_filter().map(abs).sharding_filter()
    with pytest.raises(RuntimeError, match="Sharding twice"):
        apply_sharding(dp, 2, 0)


def test_apply_sharding_validates_arguments_and_groups() -> None:
    dp = IterableWrapper(range(10)).sharding_filter()
    with pytest.raises(ValueError, match="instance_id"):
        apply_sharding(dp, 2, 2)
    apply_sharding(dp, 2, 1, SHARDING_PRIORITIES.DISTRIBUTED)
    with pytest.raises(RuntimeError, match="mix DEFAULT"):
        apply_sharding(dp, 2, 1)
    other = IterableWrapper(range(10)).sharding_filter()
    apply_sharding(other, 2, 1)
    with pytest.raises(RuntimeError, match="mix DEFAULT"):
        apply_sharding(other, 2, 1, SHARDING_PRIORITIES.MULTIPROCESSING)


def test_sharding_group_filter_only_uses_its_group() -> None:
    dp = IterableWrapper(range(12)).sharding_filter(SHARDING_PRIORITIES.MULTIPROCESSING)
    apply_sharding(dp, 2, 1, SHARDING_PRIORITIES.DISTRIBUTED)
    apply_sharding(dp, 3, 1, SHARDING_PRIORITIES.MULTIPROCESSING)
    assert list(dp) == [1, 4, 7, 10]


def test_custom_node_with_two_argument_apply_sharding() -> None:
    class EveryOther(IterDataPipe[int]):
        def __init__(self, source: IterDataPipe[int]) -> None:
            self.source = source
            self.shard = (1, 0)

        def apply_sharding(self, n: int, i: int) -> None:
            self.shard = (n, i)

        def __iter__(self) -> Iterator[int]:
            n, i = self.shard
            return (x for k, x in enumerate(self.source) if k % n == i)

    dp = EveryOther(IterableWrapper(range(6)))
    apply_sharding(dp, 2, 1, SHARDING_PRIORITIES.MULTIPROCESSING)
    assert list(dp) == [1, 3, 5]


def test_apply_shuffle_settings() -> None:
    shuffled = IterableWrapper(range(50)).shuffle()
    assert apply_shuffle_settings(shuffled, None) is shuffled
    apply_shuffle_settings(shuffled, shuffle=False)
    assert list(shuffled) == list(range(50))
    plain = IterableWrapper(range(50))
    with pytest.warns(UserWarning, match="Adding one at the end"):
        added = apply_shuffle_settings(plain, shuffle=True)
    assert isinstance(added, Shuffler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert apply_shuffle_settings(plain, shuffle=False) is plain


def test_apply_random_seed_is_deterministic_and_changes_per_epoch() -> None:
    def epochs(base_seed: int) -> list[list[int]]:
        dp = IterableWrapper(range(30)).shuffle(buffer_size=8).map(abs).shuffle(buffer_size=4)
        generator = torch.Generator().manual_seed(base_seed)
        out = []
        for _ in range(3):
            apply_random_seed(dp, generator)
            out.append(list(dp))
        return out

    first, again = epochs(0), epochs(0)
    assert first == again
    assert first[0] != first[1] != first[2]
    assert all(sorted(epoch) == list(range(30)) for epoch in first)
    assert epochs(1) != first


def test_unseeded_shuffle_follows_torch_manual_seed() -> None:
    torch.manual_seed(5)
    first = list(IterableWrapper(range(20)).shuffle())
    torch.manual_seed(5)
    assert list(IterableWrapper(range(20)).shuffle()) == first
