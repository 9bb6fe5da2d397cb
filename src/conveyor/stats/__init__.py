"""Opt-out counters: is the loader the bottleneck? (``loader.stats()``)."""

from conveyor.stats.counters import LoaderStats, StepClock, WorkerStats
from conveyor.stats.progress import progress

__all__ = ["LoaderStats", "StepClock", "WorkerStats", "progress"]
