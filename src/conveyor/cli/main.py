"""``conveyor`` entry point: an argparse parser whose subcommands live in their own modules.

A subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (``args -> exit status``) as a default. To add one, write
``conveyor/cli/NAME.py`` with ``register`` and append its name to `COMMANDS`. Parsers use
`conveyor.cli.parsing.HelpFormatter`, so every option's help shows its default.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
from collections.abc import Sequence

import conveyor
from conveyor.cli.parsing import EXIT_ERROR, Parser, print_help_instead

__all__ = ["COMMANDS", "build_parser", "main", "version_text"]

COMMANDS: list[str] = ["demo", "shards", "bench", "doctor"]
"""Subcommand modules under ``conveyor.cli``, in help order."""


def version_text() -> str:
    """``conveyor X (torch Y, Python Z)``: what a bug report needs."""
    import torch

    return (
        f"conveyor {conveyor.__version__} (torch {torch.__version__}, "
        f"Python {platform.python_version()})"
    )


def build_parser() -> argparse.ArgumentParser:
    """The full parser, every registered subcommand included."""
    parser = Parser(
        prog="conveyor",
        description="conveyor: data loading for PyTorch (a drop-in for torch.utils.data)",
    )
    parser.add_argument("--version", action="version", version=version_text())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    print_help_instead(parser)
    for name in COMMANDS:
        importlib.import_module(f"conveyor.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (`conveyor.cli.parsing.EXIT_CODES`).

    Usage errors exit through ``SystemExit(2)`` as argparse does; a missing command prints
    the help and returns 2; a failing command prints ``conveyor COMMAND: error: ...`` on
    stderr and returns 1.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args)
    except (OSError, ValueError, RuntimeError, ImportError) as error:
        print(f"conveyor {args.command}: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    return status


if __name__ == "__main__":
    raise SystemExit(main())
