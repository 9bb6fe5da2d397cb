"""Whether conveyor's extras are all installed: ``python extras_installed.py test,image``.

Used by scripts/setup.sh so that a venv with the ``test`` extra (which includes ``image``)
is not reinstalled for demo.sh's ``image``. Reads conveyor's installed metadata, follows
nested extras (``conveyor[remote,image]``) and checks every requirement's version; exits
0 when all are there, 1 naming the first missing one.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution, version

try:
    from packaging.requirements import Requirement
except ImportError:  # a venv with only the demo's packages: pip's copy
    from pip._vendor.packaging.requirements import Requirement


def missing(extras: set[str]) -> str | None:
    """The first requirement of conveyor with ``extras`` that is not installed, or None."""
    try:
        requires = distribution("conveyor").requires or []
    except PackageNotFoundError:
        return "conveyor itself"
    wanted, seen = set(extras), set()
    while wanted:
        extra = wanted.pop()
        seen.add(extra)
        for text in requires:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not marker.evaluate({"extra": extra}):
                continue
            if requirement.name == "conveyor":
                wanted |= set(requirement.extras) - seen
                continue
            try:
                found = version(requirement.name)
            except PackageNotFoundError:
                return f"{requirement} (not installed)"
            if not requirement.specifier.contains(found, prereleases=True):
                return f"{requirement} ({found} installed)"
    return None


def main() -> int:
    names = sys.argv[1].split(",") if sys.argv[1:] else []
    extras = {name.strip() for name in names if name.strip()}
    gap = missing(extras or {""})
    if gap is not None:
        print(f"missing: {gap}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
