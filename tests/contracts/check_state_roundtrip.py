"""The state contract every DataPipe node must meet (shared by all node tests).

For every position ``k`` of the stream: pull ``k`` items, take ``state_dict()`` (plain
data only, through a ``torch.save`` / ``torch.load(weights_only=True)`` round trip, so it
holds no live objects and loading it runs no code), build a *fresh* graph, load the state,
and check that the rest of its stream equals the rest of the uninterrupted run — while
the original graph, untouched by the snapshot, also finishes identically.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils.data.datapipes.datapipe import DataChunk as TorchDataChunk

from conveyor.datapipes.base import IterDataPipe
from conveyor.state.plain import check_plain


def typed(item: Any) -> Any:
    """Comparable values with each batch's class kept (a resumed DataChunk must be a
    DataChunk; conveyor's subclasses torch's); tensors as lists."""
    if isinstance(item, torch.Tensor):
        return item.tolist()
    if isinstance(item, TorchDataChunk):
        return ("DataChunk", [typed(x) for x in item])
    if isinstance(item, list | tuple):
        return type(item)(typed(x) for x in item)
    return item


def weights_only_roundtrip(state: Any) -> Any:
    """``state`` after ``torch.save`` and ``torch.load(weights_only=True)``; plain first."""
    check_plain(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _same(items: Iterable[Any], normalize: Callable[[Any], Any]) -> list[Any]:
    return [normalize(item) for item in items]


def check_state_roundtrip(
    make_graph: Callable[[], IterDataPipe[Any]],
    *,
    normalize: Callable[[Any], Any] = lambda item: item,
    positions: Iterable[int] | None = None,
) -> list[Any]:
    """Assert the resume contract for ``make_graph``; returns the full expected stream.

    ``normalize`` maps items to comparable values (e.g. tensors to lists); ``positions``
    limits the checked ``k`` (default: every position, the end included).
    """
    expected = _same(make_graph(), normalize)
    checked = range(len(expected) + 1) if positions is None else positions
    for k in checked:
        graph = make_graph()
        it = iter(graph)
        head = _same((next(it) for _ in range(k)), normalize)
        assert head == expected[:k], f"prefix differs at k={k}"
        state = weights_only_roundtrip(graph.state_dict())
        assert isinstance(state, dict) and "version" in state, state
        tail = _same(it, normalize)
        assert head + tail == expected, f"taking state perturbed the run at k={k}"
        resumed = make_graph()
        resumed.load_state_dict(state)
        rest = _same(resumed, normalize)
        assert head + rest == expected, f"resume at k={k}: got {rest}, expected {expected[k:]}"
    return expected
