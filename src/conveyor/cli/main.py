"""``conveyor`` entry point: an argparse parser whose subcommands live in their own modules.

A subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (``args -> exit status``) as a default. To add one (e.g. ``bench``), write
``conveyor/cli/bench.py`` with ``register`` and append its name to `COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS: list[str] = ["shards", "bench"]
"""Subcommand modules under ``conveyor.cli``, in help order."""


def build_parser() -> argparse.ArgumentParser:
    """The full parser, every registered subcommand included."""
    parser = argparse.ArgumentParser(
        prog="conveyor", description="conveyor: data loading for PyTorch"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMANDS:
        importlib.import_module(f"conveyor.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (errors print one line, status 1)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args)
    except (OSError, ValueError, RuntimeError) as error:
        print(f"conveyor {args.command}: error: {error}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
