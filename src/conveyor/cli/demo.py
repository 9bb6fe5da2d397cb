"""``conveyor demo``: the README's demo (tar shards streamed by workers into a tiny model)."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``demo`` with the demo's options."""
    from conveyor.demo import DESCRIPTION, add_arguments

    parser = subparsers.add_parser(
        "demo", help="write tar shards, stream them with workers, train a tiny model",
        description=textwrap.fill(DESCRIPTION + " Needs Pillow (pip install conveyor[image])."),
    )  # fmt: skip
    add_arguments(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from conveyor.demo import run

    return run(args)
