"""The bench's text table and JSON lines."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence

from conveyor.bench.harness import Comparison

__all__ = ["FOOTER", "format_header", "format_row", "format_table", "print_table", "write_jsonl"]

_WIDTHS = (26, 8, 25, 25, 9)

FOOTER = (
    "medians [min-max] over interleaved (ABBA) repetitions; advantage = median of the "
    "paired ratios,\n> 1 means conveyor is better (more per second, or less time)."
)


def format_number(value: float) -> str:
    """Three significant figures at least, thousands separated: ``5,357``, ``0.0712``."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _spread(samples: Sequence[float]) -> str:
    median = format_number(statistics.median(samples))
    return f"{median} [{format_number(min(samples))}-{format_number(max(samples))}]"


def format_header() -> str:
    """Column titles and a rule."""
    names = ("scenario", "unit", "conveyor", "torch", "advantage")
    title = "  ".join(
        n.ljust(w) if i < 2 else n.rjust(w)
        for i, (n, w) in enumerate(zip(names, _WIDTHS, strict=True))
    )
    return f"{title}\n{'-' * len(title)}"


def format_row(comparison: Comparison) -> str:
    """One table line: medians with [min-max] for both loaders and the paired ratio."""
    cells = (
        comparison.name.ljust(_WIDTHS[0]),
        comparison.unit.ljust(_WIDTHS[1]),
        _spread(comparison.ours).rjust(_WIDTHS[2]),
        _spread(comparison.theirs).rjust(_WIDTHS[3]),
        f"{comparison.ratio():.2f}x".rjust(_WIDTHS[4]),
    )
    return "  ".join(cells)


def format_table(rows: Sequence[Comparison]) -> str:
    """Header, one line per comparison, and the footer that says how to read it."""
    return "\n".join([format_header(), *(format_row(r) for r in rows), FOOTER])


def write_jsonl(rows: Sequence[Comparison], path: str) -> None:
    """Append one JSON object per comparison (`Comparison.row`) to ``path``."""
    with open(path, "a", encoding="utf-8") as handle:
        for comparison in rows:
            handle.write(json.dumps(comparison.row()) + "\n")


def print_table(rows: Sequence[Comparison], json_out: str | None = None) -> None:
    """Print `format_table`; with ``json_out``, also append the rows as JSON lines."""
    print(format_table(rows), flush=True)
    if json_out:
        write_jsonl(rows, json_out)
