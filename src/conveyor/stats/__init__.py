"""Opt-out counters: is the loader the bottleneck? (``loader.stats()``).

The snapshot types load on first use: the engine imports only `conveyor.stats.counters`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.lazy_names import lazy_exports

# Eager: the function shadows its submodule's name here (``from conveyor.stats import
# progress`` must give the function even after ``conveyor.stats.progress`` was imported).
from conveyor.stats.progress import progress

if TYPE_CHECKING:
    from conveyor.stats.counters import StepClock
    from conveyor.stats.figures import StageProfile, WorkerStats
    from conveyor.stats.report import LoaderStats

__all__ = ["LoaderStats", "StageProfile", "StepClock", "WorkerStats", "progress"]

_MODULES = {
    "LoaderStats": "conveyor.stats.report",
    "StageProfile": "conveyor.stats.figures",
    "WorkerStats": "conveyor.stats.figures",
    "StepClock": "conveyor.stats.counters",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULES, globals(), __all__)
