"""Draw bench results with matplotlib (``pip install conveyor[plot]``).

S1-S3: throughput against num_workers, one line per loader, min-max as error bars.
S4: time to the first batch per start method, bars per loader.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from conveyor.bench.harness import LOADERS, Comparison

__all__ = ["require_matplotlib", "save_plot"]

_TITLES = {
    "s1": "S1 transfer, uint8 3x224x224, bs64\nMB/s (higher is better)",
    "s2": "S2 tiny items (ints)\nitems/s (higher is better)",
    "s3": "S3 JPEG decode + crop 224, bs64\nimg/s (higher is better)",
    "s4": "S4 time to first batch\nseconds (lower is better)",
}
_COLOURS = {"conveyor": "tab:blue", "torch": "tab:orange"}


def require_matplotlib() -> Any:
    """The ``matplotlib.figure`` module, or a RuntimeError that says what to install."""
    try:
        from matplotlib import figure
    except ImportError as error:
        raise RuntimeError("--plot needs matplotlib: pip install conveyor[plot]") from error
    return figure


def _samples(comparison: Comparison, loader: str) -> list[float]:
    samples = comparison.ours if loader == "conveyor" else comparison.theirs
    if comparison.params.get("scenario_id") == "s2":  # us per batch -> items per second
        batch_size = comparison.params["batch_size"]
        return [batch_size * 1e6 / us for us in samples]
    return samples


def _errorbar(values: list[float]) -> tuple[float, list[float]]:
    median = statistics.median(values)
    return median, [median - min(values), max(values) - median]


def _draw_lines(axes: Any, rows: list[Comparison]) -> None:
    sizes = sorted({row.params.get("batch_size", 0) for row in rows})
    for loader in LOADERS:
        for size in sizes:
            group = sorted(
                (r for r in rows if r.params.get("batch_size", 0) == size),
                key=lambda r: r.params["num_workers"],
            )
            bars = [_errorbar(_samples(r, loader)) for r in group]
            label = loader if len(sizes) == 1 else f"{loader} bs{size}"
            axes.errorbar(
                [r.params["num_workers"] for r in group],
                [median for median, _ in bars],
                yerr=[[low for _, (low, _) in bars], [high for _, (_, high) in bars]],
                label=label,
                color=_COLOURS[loader],
                linestyle="-" if size == sizes[-1] else "--",
                marker="o",
                capsize=3,
            )
    axes.set_xlabel("num_workers")
    axes.set_xticks(sorted({r.params["num_workers"] for r in rows}))
    if len(sizes) > 1:
        axes.set_yscale("log")
    axes.set_ylim(bottom=0 if len(sizes) == 1 else None)


def _draw_bars(axes: Any, rows: list[Comparison]) -> None:
    width = 0.38
    for offset, loader in enumerate(LOADERS):
        bars = [_errorbar(_samples(r, loader)) for r in rows]
        axes.bar(
            [i + (offset - 0.5) * width for i in range(len(rows))],
            [median for median, _ in bars],
            width,
            yerr=[[low for _, (low, _) in bars], [high for _, (_, high) in bars]],
            label=loader,
            color=_COLOURS[loader],
            capsize=3,
        )
    labels = [
        "thread\n(torch: fork)" if r.params["context"] == "thread" else r.params["context"]
        for r in rows
    ]
    axes.set_xticks(range(len(rows)), labels)
    axes.set_yscale("log")
    axes.set_xlabel(f"start method, num_workers={rows[0].params['num_workers']}")


def save_plot(rows: Sequence[Comparison], path: str, title: str = "") -> None:
    """Write one panel per scenario in ``rows`` to ``path`` (format from its suffix)."""
    figure_module = require_matplotlib()
    ids = [key for key in _TITLES if any(r.params.get("scenario_id") == key for r in rows)]
    if not ids:
        raise ValueError("nothing to plot: no scenario results")
    columns = min(len(ids), 2)
    lines = -(-len(ids) // columns)
    figure = figure_module.Figure(figsize=(6 * columns, 4.2 * lines), layout="constrained")
    for index, key in enumerate(ids):
        axes = figure.add_subplot(lines, columns, index + 1)
        group = [r for r in rows if r.params.get("scenario_id") == key]
        (_draw_bars if key == "s4" else _draw_lines)(axes, group)
        axes.set_title(_TITLES[key], fontsize=10)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.savefig(path, dpi=110)
