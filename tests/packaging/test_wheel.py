"""The built wheel installs into a clean virtual environment and works there.

Follows the README's "Install into your own project": ``python -m build``, then, in a new
venv, torch first and the wheel with ``-c constraints.txt``. Step one does not extract the
750 MB torch wheel again: torch and the packages it requires are hard-linked from this
environment into the new venv (a copy where linking is impossible), which is what pip would
have installed from the same wheel; pip then sees torch as installed and resolves the rest
of conveyor's requirements itself.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import conveyor

ROOT = Path(__file__).resolve().parents[2]
SMOKE = """
import sys, conveyor, torch
assert conveyor.__file__.startswith(sys.prefix), conveyor.__file__
from conveyor import DataLoader, TensorDataset
dataset = TensorDataset(torch.arange(40).view(20, 2))
loader = DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2,
                    generator=torch.Generator().manual_seed(0))
rows = sorted(int(row[0]) for (batch,) in loader for row in batch)
assert rows == list(range(0, 40, 2)), rows
print("smoke ok", conveyor.__version__)
"""


def run(*command: str | Path, cwd: Path | None = None) -> str:
    argv = [str(part) for part in command]
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, f"{command}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def build_command(project: Path) -> list[str | Path]:
    """``python -m build`` for ``project``; a clear error when the build module is missing
    (else the failure is "No module named build" deep in a subprocess's output)."""
    if importlib.util.find_spec("build") is None:
        pytest.fail(
            "this test builds the wheel with `python -m build`, and the `build` package is not "
            f"installed in {sys.prefix}: pip install build==1.6.1 (conveyor's `test` extra "
            "has it; `bash scripts/setup.sh` installs it)",
            pytrace=False,
        )
    return [sys.executable, "-m", "build", "--no-isolation", "--outdir", project / "dist", project]


def copy_project(target: Path) -> None:
    """The files a build needs, without caches or build leftovers of the work tree."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    shutil.copytree(ROOT / "src", target / "src", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, target / name)


def requirement_closure(name: str) -> list[importlib.metadata.Distribution]:
    """``name`` and every distribution it requires (no extras), as installed here."""
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = [name]
    while pending:
        dist = importlib.metadata.distribution(pending.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return list(found.values())


def link_tree(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, copy_function=_link_or_copy, symlinks=True)
    else:
        _link_or_copy(str(source), str(target))


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def seed_torch(venv_site: Path) -> list[str]:
    """Link torch and its requirements into ``venv_site``, skipping what the venv has."""
    here = Path(sysconfig.get_paths()["purelib"])
    have = {path.name.split("-")[0].lower() for path in venv_site.glob("*.dist-info")}
    seeded = []
    for dist in requirement_closure("torch"):
        name = dist.metadata["Name"]
        if name.lower().replace("-", "_") in have:
            continue  # pip and setuptools of the new venv: pip upgrades them if needed
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in sorted(tops):
            if (here / top).exists() and not (venv_site / top).exists():
                link_tree(here / top, venv_site / top)
        seeded.append(name)
    return seeded


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_built_wheel_installs_and_runs_in_a_clean_venv(tmp_path: Path) -> None:
    clock = time.perf_counter()
    project = tmp_path / "project"
    copy_project(project)
    run(*build_command(project))
    wheels = list((project / "dist").glob("conveyor-*.whl"))
    assert [w.name for w in wheels] == [f"conveyor-{conveyor.__version__}-py3-none-any.whl"]
    assert list((project / "dist").glob("conveyor-*.tar.gz"))  # the wheel came from the sdist

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                .strip())  # fmt: skip
    assert "torch" in seed_torch(site)
    run(python, "-m", "pip", "install", "--quiet", "-c", ROOT / "constraints.txt", wheels[0])

    assert "smoke ok" in run(python, "-c", SMOKE, cwd=tmp_path)
    version = run(venv / "bin" / "conveyor", "--version").strip()
    assert version.startswith(f"conveyor {conveyor.__version__} (torch 2.13.0")
    listed = run(python, "-m", "pip", "list", "--format=freeze")
    assert f"conveyor=={conveyor.__version__}" in listed and "Pillow" not in listed
    print(f"wheel smoke test: {time.perf_counter() - clock:.1f} s")


def test_a_missing_build_module_fails_with_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "build" else real_find_spec(name, *args),
    )
    with pytest.raises(pytest.fail.Exception, match=r"pip install build==") as failed:
        build_command(tmp_path)
    assert "`build` package is not installed" in str(failed.value)
