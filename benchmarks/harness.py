"""Side-by-side measurement: conveyor and torch.utils.data interleaved, medians and ratios.

The machine is shared and noisy, so every scenario runs the two loaders alternately
(ABBA order) in one process tree and reports medians and the median of paired ratios.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Comparison:
    """Paired samples of one metric for two loaders (lower is better unless noted)."""

    name: str
    unit: str
    ours: list[float] = field(default_factory=list)
    theirs: list[float] = field(default_factory=list)
    higher_is_better: bool = False

    def add(self, ours: float, theirs: float) -> None:
        self.ours.append(ours)
        self.theirs.append(theirs)

    def ratio(self) -> float:
        """Median of paired ratios, expressed so that > 1 means conveyor is better."""
        pairs = zip(self.ours, self.theirs, strict=True)
        if self.higher_is_better:
            return statistics.median(o / t for o, t in pairs)
        return statistics.median(t / o for o, t in pairs)

    def row(self) -> dict[str, Any]:
        return {
            "scenario": self.name,
            "unit": self.unit,
            "conveyor": statistics.median(self.ours),
            "torch": statistics.median(self.theirs),
            "conveyor_min_max": [min(self.ours), max(self.ours)],
            "torch_min_max": [min(self.theirs), max(self.theirs)],
            "advantage": self.ratio(),
            "reps": len(self.ours),
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


def print_table(rows: Sequence[Comparison], json_out: str | None = None) -> None:
    header = f"{'scenario':44} {'unit':10} {'conveyor':>10} {'torch':>10} {'advantage':>9}"
    print(header)
    print("-" * len(header))
    for comparison in rows:
        r = comparison.row()
        print(
            f"{r['scenario']:44} {r['unit']:10} {r['conveyor']:10.4g} {r['torch']:10.4g} "
            f"{r['advantage']:8.2f}x"
        )
    if json_out:
        with open(json_out, "a") as fh:
            for comparison in rows:
                fh.write(json.dumps(comparison.row()) + "\n")
