"""Draw bench results with matplotlib (``pip install conveyor[plot]``).

One panel per scenario and batch size, in the table's units (S2 in us per batch, lower is
better): S1-S3 plot the value against num_workers, one line per loader, min-max as error
bars; S4 draws the time to the first batch per start method, bars per loader.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from conveyor.bench.harness import LOADERS, Comparison

__all__ = ["panels", "require_matplotlib", "save_plot"]

_TITLES = {
    "s1": "S1 transfer, uint8 3x224x224",
    "s2": "S2 tiny items (ints)",
    "s3": "S3 JPEG decode + crop 224",
    "s4": "S4 time to first batch",
}
_COLOURS = {"conveyor": "tab:blue", "torch": "tab:orange"}
_UNIT_NAMES = {"s": "seconds"}
_LOG_SPREAD = 30.0
"""Above this max/min ratio of the plotted values, a panel uses a log scale."""


def require_matplotlib() -> Any:
    """The ``matplotlib.figure`` module, or a RuntimeError that says what to install."""
    try:
        from matplotlib import figure
    except ImportError as error:
        raise RuntimeError("--plot needs matplotlib: pip install conveyor[plot]") from error
    return figure


def _samples(comparison: Comparison, loader: str) -> list[float]:
    return comparison.ours if loader == "conveyor" else comparison.theirs


def _errorbar(values: list[float]) -> tuple[float, list[float]]:
    median = statistics.median(values)
    return median, [median - min(values), max(values) - median]


def panels(rows: Sequence[Comparison]) -> list[tuple[str, list[Comparison]]]:
    """``[(title, rows)]``: one panel per scenario and batch size, in scenario order.

    A title names the scenario, the batch size (when the scenario has one) and the unit
    of the table with the direction that is better.
    """
    found: dict[tuple[str, int], list[Comparison]] = {}
    for row in rows:
        key = (str(row.params.get("scenario_id", "")), int(row.params.get("batch_size", 0)))
        found.setdefault(key, []).append(row)
    order = list(_TITLES)
    keys = sorted(
        (key for key in found if key[0] in _TITLES), key=lambda k: (order.index(k[0]), k[1])
    )
    result = []
    for scenario, batch_size in keys:
        group = found[scenario, batch_size]
        better = "higher" if group[0].higher_is_better else "lower"
        size = f", batch size {batch_size}" if batch_size else ""
        unit = _UNIT_NAMES.get(group[0].unit, group[0].unit)
        title = f"{_TITLES[scenario]}{size}\n{unit} ({better} is better)"
        result.append((title, group))
    return result


def _scale(axes: Any, values: list[float]) -> None:
    positive = [value for value in values if value > 0]
    if positive and max(positive) / min(positive) > _LOG_SPREAD:
        axes.set_yscale("log")
    else:
        axes.set_ylim(bottom=0)


def _draw_lines(axes: Any, rows: list[Comparison]) -> None:
    group = sorted(rows, key=lambda r: r.params["num_workers"])
    workers = [r.params["num_workers"] for r in group]
    plotted: list[float] = []
    for loader in LOADERS:
        bars = [_errorbar(_samples(r, loader)) for r in group]
        plotted += [value for r in group for value in _samples(r, loader)]
        axes.errorbar(
            workers,
            [median for median, _ in bars],
            yerr=[[low for _, (low, _) in bars], [high for _, (_, high) in bars]],
            label=loader,
            color=_COLOURS[loader],
            marker="o",
            capsize=3,
        )
    axes.set_xlabel("num_workers")
    axes.set_xticks(sorted(set(workers)))
    _scale(axes, plotted)


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
    """Write one panel per scenario and batch size (`panels`) to ``path`` (format from its
    suffix)."""
    figure_module = require_matplotlib()
    found = panels(rows)
    if not found:
        raise ValueError("nothing to plot: no scenario results")
    columns = min(len(found), 2)
    lines = math.ceil(len(found) / columns)
    figure = figure_module.Figure(figsize=(6 * columns, 4.2 * lines), layout="constrained")
    for index, (panel_title, group) in enumerate(found):
        axes = figure.add_subplot(lines, columns, index + 1)
        scenario = group[0].params.get("scenario_id")
        (_draw_bars if scenario == "s4" else _draw_lines)(axes, group)
        axes.set_title(panel_title, fontsize=10)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.savefig(path, dpi=110)
