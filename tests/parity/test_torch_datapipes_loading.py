"""torch's own DataPipes in conveyor's DataLoader, and conveyor's in torch's (issue #34).

torch's DataLoader seeds, shuffles and shards its own DataPipe graphs; conveyor's loader
must do the same to them (with its own code: the graph is the user's dataset, only its
pipes' own methods run), so the oracle is torch's loader on the same graph: same items,
same order, every epoch. The other way round, torch's loader treats a conveyor graph as a
plain IterableDataset; the graph then shards and seeds itself from torch's worker info.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils.data as torch_data
import torch.utils.data.datapipes.iter as tdi
import torch.utils.data.datapipes.map as tdm

import conveyor
import conveyor.datapipes.iter as cdi

N = 120


def double(x: int) -> int:
    return 2 * x


def chain() -> Any:
    return tdi.IterableWrapper(range(N)).shuffle().sharding_filter().map(double)


def zipped() -> Any:
    """Two shufflers: each must get torch's seed (the graph walk's order matters)."""
    left = tdi.IterableWrapper(range(N)).shuffle(buffer_size=16)
    right = tdi.IterableWrapper(range(1000, 1000 + N)).shuffle()
    return left.zip(right).sharding_filter()


def forked() -> Any:
    """fork + mux behind the sharding node: torch's child pipes point at a shared parent."""
    first, second = tdi.IterableWrapper(range(N)).shuffle().fork(2)
    return first.map(double).mux(second).sharding_filter()


GRAPHS: dict[str, Callable[[], Any]] = {"chain": chain, "zipped": zipped, "forked": forked}


def epochs(loader_class: type, build: Callable[[], Any], count: int = 3, **kwargs: Any) -> Any:
    loader = loader_class(
        build(), batch_size=None, generator=torch.Generator().manual_seed(11), **kwargs
    )
    return [[_plain(item) for item in loader] for _ in range(count)]


def _plain(item: Any) -> Any:
    if isinstance(item, torch.Tensor):
        return item.tolist()
    if isinstance(item, list | tuple):
        return [_plain(x) for x in item]
    return item


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("shuffle", [None, False, True])
@pytest.mark.parametrize(
    "workers",
    [
        {"num_workers": 0},
        {"num_workers": 2},
        {"num_workers": 2, "persistent_workers": True},
    ],
    ids=["0-workers", "2-workers", "2-persistent"],
)
def test_a_torch_graph_loads_as_torchs_loader_loads_it(
    graph: str, shuffle: bool | None, workers: dict[str, Any]
) -> None:
    build = GRAPHS[graph]
    expected = epochs(torch_data.DataLoader, build, shuffle=shuffle, **workers)
    got = epochs(conveyor.DataLoader, build, shuffle=shuffle, **workers)
    assert got == expected
    size = len(expected[0])
    assert size == (2 * N if graph == "forked" else N)  # once each: no worker read it all
    if shuffle is False:
        assert got[0] == got[1]  # shuffle=False turned the graph's shufflers off
    else:
        assert got[0] != got[1]  # a new order every epoch


@pytest.mark.parametrize(
    "workers", [{"worker_type": "thread"}, {"multiprocessing_context": "spawn"}]
)
def test_thread_and_spawn_workers_load_a_torch_graph_as_torch_does(workers: dict[str, Any]) -> None:
    expected = epochs(torch_data.DataLoader, chain, count=2, num_workers=2)
    assert epochs(conveyor.DataLoader, chain, count=2, num_workers=2, **workers) == expected


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_torch_graph_resumes_exactly_from_a_checkpoint(num_workers: int) -> None:
    def loader() -> conveyor.DataLoader[Any]:
        return conveyor.DataLoader(
            chain(),
            batch_size=4,
            num_workers=num_workers,
            generator=torch.Generator().manual_seed(2),
        )

    full = [batch.tolist() for batch in loader()]
    interrupted = loader()
    iterator = iter(interrupted)
    head = [next(iterator).tolist() for _ in range(7)]
    state = interrupted.state_dict()
    del iterator
    resumed = loader()
    resumed.load_state_dict(state)
    assert head + [batch.tolist() for batch in resumed] == full


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("persistent", [False, True])
def test_torchs_loader_shards_a_conveyor_graph_across_its_workers(
    context: str, persistent: bool
) -> None:
    graph = cdi.IterableWrapper(range(N)).shuffle().sharding_filter()
    loader = torch_data.DataLoader(
        graph,
        batch_size=None,
        num_workers=2,
        multiprocessing_context=context,
        persistent_workers=persistent,
    )
    first, second = ([int(i) for i in loader] for _ in range(2))
    for epoch in (first, second):
        counts = collections.Counter(epoch)
        assert sorted(counts) == list(range(N)) and set(counts.values()) == {1}
    assert first != second and first != sorted(first)  # shuffled, anew every epoch


def test_a_conveyor_graph_sharded_by_the_user_is_left_as_it_is_under_torchs_loader() -> None:
    graph = cdi.IterableWrapper(range(N)).sharding_filter()
    conveyor.graph_settings.apply_sharding(graph, 3, 1)
    loader = torch_data.DataLoader(graph, batch_size=None, num_workers=2)
    assert sorted(int(i) for i in loader) == sorted(2 * list(range(1, N, 3)))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_torch_map_graph_loads_as_a_map_style_dataset(num_workers: int) -> None:
    def build() -> Any:
        return tdm.SequenceWrapper(list(range(N))).map(double)

    kwargs = {"shuffle": True, "num_workers": num_workers}
    assert epochs(conveyor.DataLoader, build, 2, **kwargs) == epochs(
        torch_data.DataLoader, build, 2, **kwargs
    )
