"""Walking a DataPipe graph (published as `conveyor.graph`, torch's ``data.graph``).

A graph is a nested dict ``{id(dp): (dp, {id(input): (input, {...}), ...})}`` rooted at
the last pipe, as torch's ``traverse_dps`` returns it. Inputs are found with each pipe's
``datapipe_inputs()`` (by default: pipes held in its attributes, directly or in lists,
tuples, sets and dict values), not by pickling the graph as torch does, so lambdas and
large wrapped lists cost nothing. A pipe reachable along several paths appears under each;
cycles are cut.

torch's own DataPipes (``torch.utils.data.datapipes``, torchdata's) are walked too, by their
attributes in definition order (which is the order torch's pickle-based walk finds them in
for torch's nodes), so that `conveyor.DataLoader` seeds, shuffles and shards a user's torch
graph itself: no function of ``torch.utils.data`` runs, only the user's pipes' own methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from conveyor.datapipes.base import DataPipe, IterDataPipe, MapDataPipe
from conveyor.datapipes.node import scan_inputs
from conveyor.torch_compat import is_torch_datapipe

__all__ = [
    "DataPipe",
    "DataPipeGraph",
    "datapipe_inputs",
    "is_any_datapipe",
    "iter_pipes",
    "list_dps",
    "traverse_dps",
]

DataPipeGraph = dict[int, tuple[DataPipe, "DataPipeGraph"]]


def traverse_dps(datapipe: DataPipe) -> DataPipeGraph:
    """The graph ending at ``datapipe``; `RuntimeError` if it is not a DataPipe."""
    return _walk(datapipe, frozenset())


def is_any_datapipe(obj: object) -> bool:
    """A DataPipe of conveyor's or of torch's (torchdata's subclass torch's)."""
    return isinstance(obj, IterDataPipe | MapDataPipe) or is_torch_datapipe(obj)


def datapipe_inputs(datapipe: Any) -> list[Any]:
    """The pipes ``datapipe`` reads from: its own ``datapipe_inputs()`` for conveyor's
    pipes; for torch's, the pipes among its attributes (``vars``: no torch code runs)."""
    if isinstance(datapipe, IterDataPipe | MapDataPipe):
        return datapipe.datapipe_inputs()
    return scan_inputs(vars(datapipe))


def _walk(datapipe: DataPipe, path: frozenset[int]) -> DataPipeGraph:
    if not is_any_datapipe(datapipe):
        raise RuntimeError(
            f"Expected `IterDataPipe` or `MapDataPipe`, but {type(datapipe)} is found"
        )
    key = id(datapipe)
    if key in path:
        return {}
    inner = path | {key}
    children: DataPipeGraph = {}
    for child in datapipe_inputs(datapipe):
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
        stack.extend(datapipe_inputs(node))
