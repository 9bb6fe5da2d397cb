"""Opt-out counters: is the loader the bottleneck? (``loader.stats()``).

The snapshot types load on first use: the engine imports only `conveyor.stats.counters`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Eager: the function shadows its submodule's name here (``from conveyor.stats import
# progress`` must give the function even after ``conveyor.stats.progress`` was imported).
from conveyor.stats.progress import progress

if TYPE_CHECKING:
    from conveyor.stats.counters import StepClock
    from conveyor.stats.report import LoaderStats, StageProfile, WorkerStats

__all__ = ["LoaderStats", "StageProfile", "StepClock", "WorkerStats", "progress"]

_MODULES = {
    "LoaderStats": "conveyor.stats.report",
    "StageProfile": "conveyor.stats.report",
    "WorkerStats": "conveyor.stats.report",
    "StepClock": "conveyor.stats.counters",
}


def __getattr__(name: str) -> Any:
    module_name = _MODULES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'conveyor.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
