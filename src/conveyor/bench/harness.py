"""Paired measurement: conveyor and torch.utils.data interleaved, medians and paired ratios.

Machines running this are often shared and noisy, so every scenario runs the two loaders
alternately (ABBA order) in one process tree and reports the medians and the median of
the per-repetition ratios.

This package is the one place under ``conveyor/`` that touches ``torch.utils.data``: the
bench exists to measure against it. `loader_class` looks it up on ``torch``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LOADERS", "BenchSettings", "Comparison", "compare", "interleave", "loader_class"]

LOADERS = ("conveyor", "torch")
"""The two loaders every scenario compares, in table order."""


@dataclass(frozen=True)
class BenchSettings:
    """What to run; shared by every scenario."""

    num_workers: tuple[int, ...] = (0, 1, 2)
    """Worker counts for S1-S3; S4 uses the largest (skipped when it is 0)."""
    reps: int = 3
    """Interleaved repetitions per configuration (S4 runs one with ``quick``)."""
    quick: bool = False
    """Smaller measurements: a fast look, not numbers to quote."""
    contexts: tuple[str, ...] = ("fork", "forkserver", "spawn", "thread")
    """S4 start methods; ``thread`` is conveyor's thread workers against torch's fork."""


@dataclass
class Comparison:
    """Paired samples of one metric for two loaders (lower is better unless noted)."""

    name: str
    unit: str
    ours: list[float] = field(default_factory=list)
    theirs: list[float] = field(default_factory=list)
    higher_is_better: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    """Extra JSON fields describing the configuration (scenario id, num_workers, ...)."""

    def add(self, ours: float, theirs: float) -> None:
        """Record one repetition's pair."""
        self.ours.append(ours)
        self.theirs.append(theirs)

    def ratio(self) -> float:
        """Median of paired ratios, expressed so that > 1 means conveyor is better."""
        pairs = zip(self.ours, self.theirs, strict=True)
        if self.higher_is_better:
            return statistics.median(o / t for o, t in pairs)
        return statistics.median(t / o for o, t in pairs)

    def row(self) -> dict[str, Any]:
        """One JSON-ready summary: medians, min-max, paired ratio and the raw samples."""
        return {
            "scenario": self.name,
            "unit": self.unit,
            "conveyor": statistics.median(self.ours),
            "torch": statistics.median(self.theirs),
            "conveyor_min_max": [min(self.ours), max(self.ours)],
            "torch_min_max": [min(self.theirs), max(self.theirs)],
            "advantage": self.ratio(),
            "reps": len(self.ours),
            "higher_is_better": self.higher_is_better,
            "conveyor_reps": list(self.ours),
            "torch_reps": list(self.theirs),
            **self.params,
        }


def interleave(
    reps: int, ours: Callable[[], float], theirs: Callable[[], float]
) -> tuple[list[float], list[float]]:
    """Run the two measurements ABBA-interleaved ``reps`` times each."""
    a: list[float] = []
    b: list[float] = []
    for rep in range(reps):
        if rep % 2 == 0:
            a.append(ours())
            b.append(theirs())
        else:
            b.append(theirs())
            a.append(ours())
    return a, b


def compare(
    name: str,
    unit: str,
    measure: Callable[[str], float],
    reps: int,
    *,
    higher_is_better: bool,
    params: dict[str, Any],
) -> Comparison:
    """``measure(loader)`` for conveyor and torch, `interleave`-d, as a `Comparison`."""
    ours, theirs = interleave(reps, lambda: measure("conveyor"), lambda: measure("torch"))
    return Comparison(name, unit, ours, theirs, higher_is_better, params)


def loader_class(loader: str) -> Any:
    """``DataLoader`` of ``"conveyor"`` or ``"torch"`` (torch.utils.data, imported here)."""
    if loader == "conveyor":
        from conveyor.dataloader import DataLoader

        return DataLoader
    if loader == "torch":
        import torch

        # The reference the bench measures against; ``import torch`` has loaded it.
        return torch.utils.data.DataLoader  # noqa: TID251 - the comparison reference
    raise ValueError(f"loader must be one of {LOADERS}, got {loader!r}")
