"""Side-by-side benchmarks of conveyor and torch.utils.data (``conveyor bench``).

The same code serves the command line and the scripts in ``benchmarks/``: `Comparison` and
`interleave` pair the two loaders' measurements, `run_scenarios` runs S1-S4, and
`report` / `plot` present them.
"""

from conveyor.bench.harness import (
    LOADERS,
    BenchSettings,
    Comparison,
    compare,
    interleave,
    loader_class,
)
from conveyor.bench.report import format_table, print_table, write_jsonl
from conveyor.bench.scenarios import SCENARIOS, run_scenarios

__all__ = [
    "LOADERS",
    "SCENARIOS",
    "BenchSettings",
    "Comparison",
    "compare",
    "format_table",
    "interleave",
    "loader_class",
    "print_table",
    "run_scenarios",
    "write_jsonl",
]
