"""The command line's parser conventions: help that shows defaults, exit statuses."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = [
    "EXIT_CODES",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "HelpFormatter",
    "Parser",
    "print_help_instead",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  success
  {EXIT_ERROR}  the command failed (a missing file, a bad shard, a missing optional
     dependency, ...); one line on stderr says why
  {EXIT_USAGE}  usage error: an unknown command or option, a bad value, or no command
     (help is printed)
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps epilogs as written and appends ``(default: X)`` to every option with a default.

    Unlike `argparse.ArgumentDefaultsHelpFormatter`, flags (default ``False``) and options
    without a default (``None``) get no note, and a help text that already names its
    default is left alone.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default:" in text
            or default is None
            or default is False
            or default == argparse.SUPPRESS
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` with `HelpFormatter` and `EXIT_CODES` in every help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        epilog = kwargs.get("epilog")
        kwargs["epilog"] = f"{epilog}\n{EXIT_CODES}" if epilog else EXIT_CODES
        super().__init__(*args, **kwargs)


def print_help_instead(parser: argparse.ArgumentParser) -> None:
    """Without a subcommand, ``parser`` prints its full help and exits with status 2."""

    def show_help(args: argparse.Namespace) -> int:
        parser.print_help()
        return EXIT_USAGE

    parser.set_defaults(func=show_help)
