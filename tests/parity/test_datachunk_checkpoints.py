"""Checkpoints of graphs whose buffers hold ``batch()``'s DataChunks (torch is the oracle).

A fork or a shuffle after ``batch()`` buffers `DataChunk` batches. Their state must be plain
data that survives ``torch.save`` / ``torch.load(weights_only=True)``, and resuming must
give back the rest of the run with each batch a `DataChunk` again, as the uninterrupted run
(and torch's DataPipes on the same graph) yield. torch's own
``test_simple_snapshot_graph`` checkpoints exactly such graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
import torch.utils.data.datapipes.iter as tdi

from contracts.check_state_roundtrip import typed, weights_only_roundtrip
from conveyor.datapipes import iter as cdi
from conveyor.datapipes.node import DataChunk
from conveyor.state.plain_form import TAG


def forked(lib: Any) -> Any:
    """torch's test_simple_snapshot_graph: fork + zip of batches, then concat."""
    first, second = lib.IterableWrapper(range(10)).batch(2).fork(2)
    return first.zip(second)


def forked_uneven(lib: Any) -> Any:
    """One output read to its end before the other: the fork buffers every batch."""
    first, second = lib.IterableWrapper(range(10)).batch(2).fork(2)
    return first.concat(second)


def shuffled(lib: Any) -> Any:
    return lib.IterableWrapper(range(20)).batch(2).shuffle(buffer_size=4)


GRAPHS: dict[str, Callable[[Any], Any]] = {
    "fork+zip": forked,
    "fork+concat": forked_uneven,
    "shuffle": shuffled,
}


def _conveyor(name: str) -> Any:
    graph = GRAPHS[name](cdi)
    if name == "shuffle":
        graph.set_seed(5)
    return graph


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_batched_graph_resumes_after_a_weights_only_load(name: str) -> None:
    expected = [typed(b) for b in _conveyor(name)]
    torch_run = [typed(b) for b in GRAPHS[name](tdi)]
    if name == "shuffle":  # the same batches; the order is each library's own RNG
        assert sorted(map(repr, expected)) == sorted(map(repr, torch_run))
    else:
        assert expected == torch_run
    for k in range(len(expected) + 1):
        graph = _conveyor(name)
        it = iter(graph)
        head = [typed(next(it)) for _ in range(k)]
        state = weights_only_roundtrip(graph.state_dict())
        assert head + [typed(b) for b in it] == expected, f"taking state perturbed k={k}"
        resumed = _conveyor(name)
        resumed.load_state_dict(state)
        rest = [typed(b) for b in resumed]
        assert head + rest == expected, f"resume at k={k}: {rest}"


def test_the_state_holds_batches_in_a_tagged_form_not_the_class() -> None:
    graph = _conveyor("fork+concat")
    it = iter(graph)
    next(it)
    state = graph.state_dict()
    buffer = state["sources"][0]["container"]["buffer"]
    assert buffer and all(type(b) is dict and b[TAG] == "DataChunk" for b in buffer), buffer
    resumed = _conveyor("fork+concat")
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert rest and all(type(b) is DataChunk for b in rest), rest


def test_an_item_that_is_not_plain_is_refused_when_the_state_is_taken() -> None:
    """Not a checkpoint that fails at resume: the error names the pipe, path and type."""
    graph = cdi.IterableWrapper([Fraction(i, 3) for i in range(9)]).batch(2).shuffle()
    it = iter(graph)
    next(it)
    pattern = r"Shuffler\.state_dict: fractions\.Fraction at buffer\[\d\]\[0\]: a checkpoint"
    with pytest.raises(TypeError, match=pattern):
        graph.state_dict()
    assert len(list(it)) == 4  # the run goes on


def test_a_dict_item_holding_the_tag_key_comes_back_as_it_was() -> None:
    items = [{TAG: "DataChunk", "value": [i]} for i in range(8)]
    make = lambda: cdi.IterableWrapper(items).batch(2).shuffle(buffer_size=3).set_seed(1)  # noqa: E731
    expected = [typed(b) for b in make()]
    graph = make()
    it = iter(graph)
    head = [typed(next(it))]
    resumed = make()
    resumed.load_state_dict(weights_only_roundtrip(graph.state_dict()))
    assert head + [typed(b) for b in resumed] == expected


def test_an_unknown_tag_is_a_clear_error() -> None:
    graph = _conveyor("fork+concat")
    it = iter(graph)
    next(it)
    state = graph.state_dict()
    state["sources"][0]["container"]["buffer"][0][TAG] = "Mystery"
    resumed = _conveyor("fork+concat")
    with pytest.raises(ValueError, match="tagged __conveyor_type__='Mystery'"):
        resumed.load_state_dict(state)
