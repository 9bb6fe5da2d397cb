"""``conveyor bench``: conveyor against torch.utils.data, side by side, as a table or a plot."""

from __future__ import annotations

import argparse
import os
import platform
from typing import Any

import torch

from conveyor.bench.harness import BenchSettings, Comparison
from conveyor.bench.report import FOOTER, format_header, format_row, write_jsonl
from conveyor.bench.scenarios import SCENARIOS, run_scenarios
from conveyor.bench.startup import CONTEXTS

__all__ = ["register", "run_bench"]

_HELP = """\
scenarios:
  s1  in-memory uint8 3x224x224 tensors, batch 64, MB/s (consumer touches every page)
  s2  Python ints, batch 1 and 32, microseconds per batch
  s3  JPEG decode + random crop 224 over generated JPEGs, batch 64, img/s (needs Pillow)
  s4  seconds to the first batch, a fresh interpreter per measurement, per start method,
      at the largest --num-workers
Both loaders run interleaved (ABBA) in this process tree; each row gives medians with
[min-max] and the median paired ratio ("advantage", > 1: conveyor is better).
"""


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ints: {text!r}") from None
    if any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"worker counts must be >= 0: {text!r}")
    return values


def _choices(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(part.strip().lower() for part in text.split(",") if part.strip())
        unknown = [value for value in values if value not in allowed]
        if unknown or not values:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}: got {text!r}")
        return values

    return parse


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return value


def register(subparsers: Any) -> None:
    """Add ``bench`` and its options."""
    parser = subparsers.add_parser(
        "bench",
        help="throughput against torch.utils.data, side by side",
        description="Run benchmark scenarios with conveyor and torch.utils.data interleaved.",
        epilog=_HELP,
    )
    parser.add_argument(
        "--scenarios", type=_choices(tuple(SCENARIOS)), default=",".join(SCENARIOS),
        help="comma-separated subset of " + ",".join(SCENARIOS),
    )  # fmt: skip
    parser.add_argument(
        "--num-workers", type=_int_list, default="0,1,2",
        help="comma-separated worker counts (S4 uses the largest)",
    )  # fmt: skip
    parser.add_argument("--reps", type=_positive, default=3, help="interleaved repetitions")
    parser.add_argument(
        "--quick", action="store_true",
        help="small measurements and one S4 repetition: a fast look, not numbers to quote",
    )  # fmt: skip
    parser.add_argument(
        "--contexts", type=_choices(CONTEXTS), default=",".join(CONTEXTS),
        help="S4 start methods (thread: conveyor's thread workers against torch's fork)",
    )  # fmt: skip
    parser.add_argument("--json", metavar="PATH", help="append one JSON object per row")
    parser.add_argument(
        "--plot", metavar="PATH", help="draw the results (PNG/SVG/PDF); needs conveyor[plot]"
    )
    parser.set_defaults(func=run_bench)


def _title(settings: BenchSettings) -> str:
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    quick = " (S4: 1), --quick" if settings.quick else ""
    return (
        f"conveyor bench: {os.cpu_count()} CPUs{load}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, {settings.reps} reps{quick}"
    )


def run_bench(args: argparse.Namespace) -> int:
    """Run the scenarios, streaming the table; then write JSON and the plot if asked."""
    if args.plot:
        from conveyor.bench.plot import require_matplotlib

        require_matplotlib()  # fail before minutes of measuring, not after
    settings = BenchSettings(
        num_workers=args.num_workers, reps=args.reps, quick=args.quick, contexts=args.contexts
    )
    title = _title(settings)
    print(title, format_header(), sep="\n", flush=True)
    rows: list[Comparison] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the workers: one intra-op thread per process
    try:
        for comparison in run_scenarios(settings, list(args.scenarios)):
            rows.append(comparison)
            print(format_row(comparison), flush=True)
    finally:
        torch.set_num_threads(threads)
    print(FOOTER)
    if args.json:
        write_jsonl(rows, args.json)
    if args.plot:
        from conveyor.bench.plot import save_plot

        save_plot(rows, args.plot, title)
        print(f"plot written to {args.plot}")
    return 0
