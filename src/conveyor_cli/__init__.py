"""The ``conveyor`` command's entry point, outside the ``conveyor`` package on purpose.

Importing anything under ``conveyor`` first imports the package, and with it torch (1-5 s).
``conveyor --version`` needs neither: it reads the installed versions from the package
metadata and answers in about the time Python takes to start. Every other command goes to
`conveyor.cli.main.main`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main", "version_text"]


def version_text() -> str:
    """``conveyor X (torch Y, Python Z)``, read from the installed packages' metadata."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return (
        f"conveyor {installed('conveyor')} (torch {installed('torch')}, "
        f"Python {platform.python_version()})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``conveyor --version`` at once; anything else through the full command line."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["-V"]):
        print(version_text())
        return 0
    from conveyor.cli.main import main as full_main

    return full_main(args)
