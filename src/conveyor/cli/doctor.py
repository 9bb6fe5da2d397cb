"""``conveyor doctor MODULE:FUNCTION``: run the doctor on the loader a factory builds.

``MODULE`` is an importable module or a ``.py`` file; ``FUNCTION()`` returns the loader
(a conveyor DataLoader). The training step is ``--step MODULE:FUNCTION`` (called with each
batch) or a blocking wait of ``--step-ms`` (a GPU step), 0 by default.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

from conveyor.cli.parsing import EXIT_OK

__all__ = ["load_callable", "register"]


def register(subparsers: Any) -> None:
    """Add ``doctor``."""
    parser = subparsers.add_parser(
        "doctor",
        help="where a loader's time goes, its top fix, and a short run that measures it",
        description=(
            "Measure the loader FACTORY returns under a training step, replay cached batches "
            "for the step's own floor, name the bottleneck and the top fix with its predicted "
            "gain, then run the fix and report the measured gain beside it."
        ),
    )
    parser.add_argument("factory", help="MODULE:FUNCTION (or path/to/file.py:FUNCTION)")
    parser.add_argument("--step", default=None, help="MODULE:FUNCTION called with each batch")
    parser.add_argument("--step-ms", type=float, default=0.0, help="a blocking step of this long")
    parser.add_argument("--batches", type=int, default=48, help="batches per measured run")
    parser.add_argument("--max-seconds", type=float, default=20.0, help="cap per measured run")
    parser.add_argument("--no-counterfactual", action="store_true", help="do not try the fix")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    loader = load_callable(args.factory)()
    if not hasattr(loader, "doctor"):
        raise ValueError(f"{args.factory} returned a {type(loader).__name__}, not a DataLoader")
    step = load_callable(args.step) if args.step else _blocking_step(args.step_ms / 1e3)
    report = loader.doctor(
        step, args.batches, counterfactual=not args.no_counterfactual, max_seconds=args.max_seconds
    )
    print(report.to_json() if args.json else report.text())
    return EXIT_OK


def _blocking_step(seconds: float) -> Any:
    def step(batch: Any) -> None:
        if seconds:
            time.sleep(seconds)

    return step


def load_callable(spec: str) -> Any:
    """``module:function`` or ``file.py:function`` -> the function (ValueError if absent)."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"expected MODULE:FUNCTION, got {spec!r}")
    if where.endswith(".py"):
        path = Path(where)
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise ValueError(f"cannot import {where}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[path.stem] = module  # workers started by spawn find it by name
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"{where} has no function {name!r}")
    return function
