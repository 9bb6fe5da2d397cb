"""Which stage of a DataPipe graph is the slowest? Time every node for a few items.

`profile_pipeline` runs the graph in this thread, timing each node's
``nonblocking_next`` (inclusive of its inputs) and subtracting its inputs' time to get
the node's own time. Nothing is timed outside the call: the pipes are left as they were.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from conveyor.datapipes.base import IterDataPipe
from conveyor.graph import DataPipeGraph, traverse_dps


@dataclass(frozen=True)
class StageProfile:
    """One node: items it produced, time inside it with and without its inputs."""

    name: str
    items: int
    total_s: float
    self_s: float

    @property
    def items_per_s(self) -> float:
        return self.items / self.total_s if self.total_s > 0 else float("inf")


@dataclass(frozen=True)
class PipelineProfile:
    items: int  # items the graph's output produced
    elapsed_s: float
    stages: tuple[StageProfile, ...]  # output first, sources last

    def slowest(self) -> StageProfile | None:
        return max(self.stages, key=lambda s: s.self_s, default=None)

    def summary(self) -> str:
        slowest = self.slowest()
        rate = self.items / self.elapsed_s if self.elapsed_s > 0 else 0.0
        if slowest is None or not self.items:
            return "nothing was produced"
        share = slowest.self_s / self.elapsed_s if self.elapsed_s > 0 else 0.0
        per_item_ms = 1e3 * slowest.self_s / max(1, slowest.items)
        return (
            f"{self.items} items at {rate:,.0f}/s in one thread; slowest stage: "
            f"{slowest.name} ({share:.0%} of the time, {per_item_ms:.3f} ms per item it made)"
        )


class _Timer:
    __slots__ = ("inclusive_s", "items")

    def __init__(self) -> None:
        self.items = 0
        self.inclusive_s = 0.0


def _timed(pull: Callable[[], Any], timer: _Timer) -> Callable[[], Any]:
    clock = time.perf_counter

    def next_item() -> Any:
        start = clock()
        try:
            item = pull()
        finally:
            timer.inclusive_s += clock() - start
        timer.items += 1
        return item

    return next_item


def _nodes(graph: DataPipeGraph, inputs: dict[int, list[int]], order: list[Any]) -> None:
    for node_id, (pipe, upstream) in graph.items():
        if node_id not in inputs:
            inputs[node_id] = list(upstream)
            order.append(pipe)
        _nodes(upstream, inputs, order)


def profile_pipeline(datapipe: IterDataPipe[Any], max_items: int = 1000) -> PipelineProfile:
    """Pull up to ``max_items`` from ``datapipe`` (a fresh pass) and time every stage."""
    inputs: dict[int, list[int]] = {}
    order: list[Any] = []
    _nodes(traverse_dps(datapipe), inputs, order)
    timers = {id(pipe): _Timer() for pipe in order}
    wrapped = [p for p in order if isinstance(p, IterDataPipe)]
    for pipe in wrapped:
        pipe.nonblocking_next = _timed(pipe.nonblocking_next, timers[id(pipe)])  # type: ignore[method-assign]
    produced = 0
    start = time.perf_counter()
    try:
        iterator: Iterator[Any] = iter(datapipe)
        for _ in range(max_items):
            try:
                next(iterator)
            except StopIteration:
                break
            produced += 1
    finally:
        elapsed = time.perf_counter() - start
        for pipe in wrapped:
            del pipe.nonblocking_next  # back to the class's method
        datapipe.reset()
    stages = []
    for pipe in order:
        timer = timers[id(pipe)]
        upstream = sum(timers[i].inclusive_s for i in inputs[id(pipe)] if i in timers)
        name = type(pipe).__name__
        stages.append(
            StageProfile(
                name, timer.items, timer.inclusive_s, max(0.0, timer.inclusive_s - upstream)
            )
        )
    return PipelineProfile(produced, elapsed, tuple(stages))
