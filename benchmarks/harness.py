"""Re-export of `conveyor.bench`: the scripts here and ``conveyor bench`` share that code."""

from __future__ import annotations

from conveyor.bench.harness import Comparison, interleave
from conveyor.bench.report import print_table

__all__ = ["Comparison", "interleave", "print_table"]
