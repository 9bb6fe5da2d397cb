"""Walking a DataPipe graph (published as `conveyor.graph`, torch's ``data.graph``).

A graph is a nested dict ``{id(dp): (dp, {id(input): (input, {...}), ...})}`` rooted at
the last pipe, as torch's ``traverse_dps`` returns it. Inputs are found with each pipe's
``datapipe_inputs()`` (by default: pipes held in its attributes, directly or in lists,
tuples, sets and dict values), not by pickling the graph as torch does, so lambdas and
large wrapped lists cost nothing. A pipe reachable along several paths appears under each;
cycles are cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from conveyor.datapipes.base import DataPipe, IterDataPipe, MapDataPipe

__all__ = ["DataPipe", "DataPipeGraph", "iter_pipes", "list_dps", "traverse_dps"]

DataPipeGraph = dict[int, tuple[DataPipe, "DataPipeGraph"]]


def traverse_dps(datapipe: DataPipe) -> DataPipeGraph:
    """The graph ending at ``datapipe``; `RuntimeError` if it is not a DataPipe."""
    return _walk(datapipe, frozenset())


def _walk(datapipe: DataPipe, path: frozenset[int]) -> DataPipeGraph:
    if not isinstance(datapipe, IterDataPipe | MapDataPipe):
        raise RuntimeError(
            f"Expected `IterDataPipe` or `MapDataPipe`, but {type(datapipe)} is found"
        )
    key = id(datapipe)
    if key in path:
        return {}
    inner = path | {key}
    children: DataPipeGraph = {}
    for child in datapipe.datapipe_inputs():
        children.update(_walk(child, inner))
    return {key: (datapipe, children)}


def list_dps(graph: DataPipeGraph, exclude_dps: Iterable[DataPipe] | None = None) -> list[DataPipe]:
    """Every pipe of ``graph`` once, depth-first from the root (torchdata's ``list_dps``).

    Pipes in ``exclude_dps`` and everything reachable only through them are left out.
    """
    excluded = {id(dp) for dp in exclude_dps or ()}
    seen: set[int] = set()
    found: list[DataPipe] = []

    def visit(level: DataPipeGraph) -> None:
        for key, (datapipe, inputs) in level.items():
            if key in excluded or key in seen:
                continue
            seen.add(key)
            found.append(datapipe)
            visit(inputs)

    visit(graph)
    return found


def iter_pipes(root: object) -> Iterator[Any]:
    """Every pipe reachable from ``root`` once, in no promised order (cheap: no nesting)."""
    stack: list[Any] = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(node.datapipe_inputs())
