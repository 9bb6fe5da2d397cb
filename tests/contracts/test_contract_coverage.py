"""Every public DataPipe node of conveyor is in a shared state round-trip check.

A new node fails this test until a graph containing it joins one of the contract tables
(`test_datapipe_state.GRAPHS`, or the tar-shard table in tests/unit/formats).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import conveyor.datapipes
from conveyor.datapipes.node import IterNode, MapNode
from conveyor.graph import list_dps, traverse_dps

CONTRACT_TABLES = ("test_datapipe_state", "unit.formats.test_tar_pipes")
MACHINERY = ("conveyor.datapipes.base", "conveyor.datapipes.node")  # bases, not nodes
# torch's marker class for DataFrame pipes: a base users subclass, not a node of its own.
MARKERS = frozenset({"DFIterDataPipe"})
SHARDS = ["/nonexistent/shard-0000.tar", "/nonexistent/shard-0001.tar"]  # never opened


def _public_nodes() -> set[type]:
    found: set[type] = set()
    package = conveyor.datapipes
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, IterNode | MapNode)
                and value.__module__ == module.__name__
                and not name.startswith("_")
                and name not in MARKERS
                and value.__module__ not in MACHINERY
            ):
                found.add(value)
    return found


def _graph_nodes(make: Any) -> set[type]:
    try:
        graph = make()
    except TypeError:
        graph = make(SHARDS)  # the tar-shard table builds from a list of shard paths
    return {type(node) for node in list_dps(traverse_dps(graph))}


def test_every_public_node_is_in_a_state_roundtrip_table() -> None:
    covered: set[type] = set()
    for table in CONTRACT_TABLES:
        graphs = importlib.import_module(table).GRAPHS
        for make in graphs.values():
            covered |= _graph_nodes(make)
    missing = sorted(t.__qualname__ for t in _public_nodes() - covered)
    assert not missing, f"DataPipe nodes outside every state round-trip table: {missing}"


def test_the_node_census_sees_the_known_nodes() -> None:
    names = {t.__qualname__ for t in _public_nodes()}
    assert {"Mapper", "Shuffler", "TarShards", "SequenceWrapper", "Forker"} <= names
