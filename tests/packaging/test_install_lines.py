"""Every install command in the README and the docs keeps the user's torch (issue #34).

Left to itself, pip resolves conveyor's ``torch>=2.4`` to the newest torch on the index: on
Linux a CUDA build with several GB of ``nvidia-*`` wheels. So every documented line that
installs conveyor passes ``-c .../constraints.txt`` (torch's pin), and a ``pip install
torch==...`` line comes before it on the same page ("torch first").

Each line is also dry-run here (``pip install --dry-run --report``) in this venv, offline
(``--no-index``, ``--no-build-isolation``: everything it needs is installed, so nothing is
fetched), with the checkout standing for ``/path/to/conveyor`` and the built wheel: pip must
not want another torch, nor any ``nvidia-*`` wheel. A line whose packages are not all here
cannot be resolved offline and is skipped, saying so.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_INLINE = re.compile(r"`([^`\n]+)`")
_COMMAND = re.compile(r"(?:^|[\s;&|(])((?:\S*/)?pip3? install\b[^#`\n]*)")
_INSTALLS_CONVEYOR = re.compile(
    r"/path/to/conveyor|(?:^|\s)-e\s|conveyor[^\s]*\.whl|\bconveyor\[|[\"']?\.\["
)
_CONSTRAINT = re.compile(r"(?:^|\s)-c\s+\S*constraints\.txt")


@dataclass(frozen=True)
class InstallLine:
    page: Path
    line: int
    command: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _code_lines(page: Path) -> list[tuple[int, str]]:
    """Lines of fenced blocks, and inline code spans of prose, with their line numbers."""
    found: list[tuple[int, str]] = []
    fenced = False
    for number, text in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if text.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            found.append((number, text))
        else:
            found.extend((number, span) for span in _INLINE.findall(text))
    return found


def install_lines() -> list[InstallLine]:
    lines = []
    for page in PAGES:
        for number, text in _code_lines(page):
            for match in _COMMAND.finditer(text):
                command = match.group(1).strip().rstrip("\\").strip()
                if command.split()[2:]:  # "pip install" alone is prose, not a command
                    lines.append(InstallLine(page, number, command))
    return lines


LINES = install_lines()


def test_the_pages_document_install_lines() -> None:
    names = {line.name.split(":")[0] for line in LINES}
    assert {"README.md", "docs/getting-started.md", "docs/about.md"} <= names


@pytest.mark.parametrize("line", LINES, ids=[line.name for line in LINES])
def test_a_line_installing_conveyor_pins_torch_and_comes_after_torch(line: InstallLine) -> None:
    if not _INSTALLS_CONVEYOR.search(line.command):
        return
    assert _CONSTRAINT.search(line.command), (
        f"{line.name}: `{line.command}` installs conveyor without `-c constraints.txt`: "
        "pip may resolve another torch (a CUDA build in a fresh venv)"
    )
    earlier = [
        other
        for other in LINES
        if other.page == line.page and other.line <= line.line and other is not line
    ]
    assert any(re.search(r"pip3? install[^#]*\btorch==", o.command) for o in earlier), (
        f"{line.name}: no `pip install torch==...` line comes before `{line.command}`"
    )


def _runnable(command: str) -> str:
    """The documented command as a dry run here: this venv's pip, the checkout for the
    placeholder path and the wheel, offline, with a JSON report of what it would install."""
    command = command.replace("/path/to/conveyor", str(ROOT))
    command = re.sub(r"dist/conveyor-[^\s\"'\[]+\.whl", str(ROOT), command)
    words = command.split(None, 2)
    rest = words[2] if len(words) > 2 else ""
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    flags = "--dry-run --quiet --no-index --no-build-isolation --report - "
    return f"{pip} {flags}{rest}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("line", LINES, ids=[line.name for line in LINES])
def test_a_dry_run_of_the_line_keeps_the_installed_torch(line: InstallLine) -> None:
    done = subprocess.run(
        ["bash", "-c", _runnable(line.command)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    if done.returncode != 0:
        if "No matching distribution" in done.stderr or "Could not find a version" in done.stderr:
            why = done.stderr.strip().splitlines()[-1]
            pytest.skip(f"{line.name}: not all its packages are here; offline: {why}")
        pytest.fail(f"{line.name}: `{line.command}` failed as a dry run:\n{done.stderr}")
    report = json.loads(done.stdout)
    wanted = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in report.get("install", [])
    }
    torch_here = importlib.metadata.version("torch")
    assert wanted.get("torch", torch_here) == torch_here, (
        f"{line.name}: `{line.command}` would replace torch {torch_here} with {wanted['torch']}"
    )
    assert not [name for name in wanted if name.startswith("nvidia-")], wanted
