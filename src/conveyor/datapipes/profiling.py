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
from conveyor.datapipes.graph import DataPipeGraph, traverse_dps
from conveyor.stats.figures import StageProfile

__all__ = ["PipelineProfile", "StageProfile", "StageTimers", "profile_pipeline"]


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


class StageTimers:
    """Times every node of a graph while installed (``install`` / ``uninstall``).

    Used by `profile_pipeline`, and by DataLoader workers with ``profile_stages=True``,
    which send `snapshot` with each batch.
    """

    def __init__(self, datapipe: IterDataPipe[Any]):
        self._inputs: dict[int, list[int]] = {}
        self._order: list[Any] = []
        _nodes(traverse_dps(datapipe), self._inputs, self._order)
        self._timers = {id(pipe): _Timer() for pipe in self._order}
        self._wrapped = [p for p in self._order if isinstance(p, IterDataPipe)]

    def install(self) -> None:
        self.uninstall()  # a graph is timed by one set of timers at a time
        for pipe in self._wrapped:
            pipe.nonblocking_next = _timed(pipe.nonblocking_next, self._timers[id(pipe)])  # type: ignore[method-assign]

    def uninstall(self) -> None:
        for pipe in self._wrapped:
            vars(pipe).pop("nonblocking_next", None)  # back to the class's method

    def snapshot(self) -> tuple[StageProfile, ...]:
        stages = []
        for pipe in self._order:
            timer = self._timers[id(pipe)]
            upstream = sum(
                self._timers[i].inclusive_s for i in self._inputs[id(pipe)] if i in self._timers
            )
            self_s = max(0.0, timer.inclusive_s - upstream)
            stages.append(StageProfile(type(pipe).__name__, timer.items, timer.inclusive_s, self_s))
        return tuple(stages)


def profile_pipeline(datapipe: IterDataPipe[Any], max_items: int = 1000) -> PipelineProfile:
    """Pull up to ``max_items`` from ``datapipe`` (a fresh pass) and time every stage."""
    timers = StageTimers(datapipe)
    timers.install()
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
        timers.uninstall()
        datapipe.reset()
    return PipelineProfile(produced, elapsed, timers.snapshot())
