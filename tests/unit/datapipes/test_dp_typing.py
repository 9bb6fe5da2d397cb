"""The functional form type-checks in user code: ``mypy --strict`` on a typical chain."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SNIPPET = """
from typing import IO, Any

from conveyor.datapipes.iter import FileLister, IterDataPipe

members: IterDataPipe[tuple[str, Any]] = FileLister("shards", "*.tar").open_files(
    mode="b"
).load_from_tar()
streams: IterDataPipe[tuple[str, IO[Any]]] = FileLister(".").open_files()
samples: IterDataPipe[dict[str, Any]] = members.webdataset().header(3)
batches = FileLister(".").map(len).batch(4).collate()
names: list[IterDataPipe[str]] = FileLister(".").fork(2)
"""

TYPO = """
from conveyor.datapipes.iter import FileLister

FileLister(".").open_file()
"""


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    user_code = tmp_path / "user_code.py"
    user_code.write_text(source)
    env = dict(os.environ, MYPYPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(user_code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )


def test_file_and_tar_chain_passes_mypy_strict(tmp_path: Path) -> None:
    result = _mypy(tmp_path, SNIPPET)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_misspelt_operation_is_caught(tmp_path: Path) -> None:
    result = _mypy(tmp_path, TYPO)
    assert result.returncode == 1 and 'has no attribute "open_file"' in result.stdout
