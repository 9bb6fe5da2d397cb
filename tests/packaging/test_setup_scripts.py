"""scripts/setup.sh and test.sh (issue #34): no reinstall when demo.sh (the image extra) and
test.sh (the test extra) alternate, and no long step without a word."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _extras_installed() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "extras_installed", ROOT / "scripts" / "extras_installed.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("extras", ["image", "test", "remote,image"])
def test_extras_the_test_venv_has_need_no_install(extras: str) -> None:
    """This venv has the test extra, which includes demo.sh's image: setup.sh, asked for
    either, installs nothing (it reinstalled on every switch: the stamp held the extras)."""
    if not (ROOT / ".venv" / "bin" / "python").samefile(sys.executable):
        pytest.skip("runs in the checkout's own .venv (scripts/setup.sh makes it)")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh")],
        env=dict(os.environ, SETUP_CHECK_ONLY="1", CONVEYOR_EXTRAS=extras),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode == 10 and "changed since the last install" in done.stderr:
        pytest.skip("pyproject.toml changed since scripts/setup.sh last ran here")
    assert done.returncode == 0, done.stderr
    assert f"nothing to install for conveyor[{extras}]" in done.stderr


def test_a_missing_or_old_requirement_of_an_extra_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _extras_installed()
    requires = [
        "numpy>=1",
        'Pillow>=10; extra == "image"',
        'conveyor[image]; extra == "all"',
        'no-such-package-here>=1; extra == "image"',
        'torch>=99; extra == "future"',
    ]
    monkeypatch.setattr(module, "distribution", lambda name: SimpleNamespace(requires=requires))
    assert module.missing({""}) is None
    assert "no-such-package-here" in (module.missing({"all"}) or "")
    assert "2.13" in (module.missing({"future"}) or "")  # installed, but too old


def test_a_long_test_says_it_is_still_running(tmp_path: Path) -> None:
    """test.sh's pytest was silent for two minutes over the Lightning tests."""
    (tmp_path / "test_long.py").write_text(
        "import time\n\ndef test_long():\n    time.sleep(2.5)  # the test's own work\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "slow_test_notice",
         "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path / "test_long.py")],
        env=dict(os.environ, CONVEYOR_SLOW_TEST_NOTICE_S="1",
                 PYTHONPATH=str(ROOT / "tests")),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_long.py::test_long: still running after 1 s" in done.stdout


def test_test_sh_names_each_step_and_prints_no_banner() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert "--no-logo" in script  # lint-imports' ASCII-art banner
    for step in ("ruff check", "mypy", "lint-imports", "mkdocs build", "pytest"):
        assert f"test: {step}" in script or f'step "{step}' in script, step
