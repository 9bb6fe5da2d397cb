"""Run frameworks' own loader tests on torch (as written) and on conveyor (imports switched).

    python scripts/frameworks_conformance.py DIR [--only NAME ...] [--sides torch conveyor]
        [--mode all|tests] [--results DIR2] [-- PYTEST_ARGS...]

DIR holds each framework's files, laid out as in its repository (never copied into this
repository; fetch them at the tag of the installed version):
    DIR/lightning/tests/...      Lightning-AI/pytorch-lightning (tests/ of the 2.6 tag)
    DIR/accelerate/tests/...     huggingface/accelerate
    DIR/torchtitan/...           pytorch/torchtitan v0.2.2 (its source tree: the loader is there)
    DIR/monai/tests/...          Project-MONAI/MONAI
    DIR/pyg/test/...             pyg-team/pytorch_geometric
The frameworks themselves must be installed in this interpreter's environment (see
docs/compatibility.md). Each side runs in its own copy. On the conveyor side the test files
are rewritten (``torch.utils.data`` -> ``conveyor``, torchdata's StatefulDataLoader ->
``conveyor.stateful_dataloader``); with ``--mode all`` (the default) so is a copy of the
installed framework package, put first on the path: the framework's own loaders, samplers
and checks then use conveyor's classes too. ``--mode tests`` leaves the framework on torch.
Prints the pass/fail/skip table and every test that passes on torch but not on conveyor.
CONVEYOR_SRC=/path/to/src measures another conveyor checkout.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import conformance_report as report

# name -> (test files or folders, installed packages to rewrite, source packages in DIR/name)
SUITES: dict[str, tuple[list[str], list[str], list[str]]] = {
    "lightning": (
        [
            "tests/tests_fabric/utilities/test_data.py",
            "tests/tests_fabric/utilities/test_distributed.py",
            "tests/tests_pytorch/utilities/test_data.py",
            "tests/tests_pytorch/trainer/connectors/test_data_connector.py",
            "tests/tests_pytorch/utilities/test_combined_loader.py",
        ],
        ["lightning"],
        [],
    ),
    "accelerate": (["tests/test_data_loader.py"], ["accelerate"], []),
    "torchtitan": (
        ["tests/unit_tests/test_dataloader.py", "tests/unit_tests/test_dataset_checkpointing.py"],
        [],
        ["torchtitan"],
    ),
    "monai": (["tests/data"], ["monai"], []),
    "pyg": (["test/loader"], ["torch_geometric"], []),
}
# Lightning's tests import their helpers as top-level packages from tests/
RUN_FROM = {"lightning": "tests"}
# `import torch.utils.data` binds `torch` too; the rewritten `import conveyor` would not
_IMPORT_SUBMODULE = re.compile(r"^(\s*)import torch\.utils\.data\s*$", re.MULTILINE)


def rewrite(path: Path) -> None:
    for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
        text = file.read_text()
        if "torch.utils.data" in text or "torchdata.stateful_dataloader" in text:
            text = _IMPORT_SUBMODULE.sub(r"\1import torch\n\1import torch.utils.data", text)
            file.write_text(report.rewrite_source(text))


def prepare(name: str, side: str, source: Path, work: Path, mode: str) -> list[str]:
    """A copy of the suite for one side; returns the PYTHONPATH entries it needs."""
    targets, packages, local_packages = SUITES[name]
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work / "root", symlinks=True)
    paths = [str(work / "root")]
    if side == "conveyor":
        for target in targets:
            rewrite(work / "root" / target)
        if mode == "all":
            site = Path(sysconfig.get_paths()["purelib"])
            for package in packages:
                shutil.copytree(site / package, work / "pkgs" / package)
                rewrite(work / "pkgs" / package)
            for package in local_packages:
                rewrite(work / "root" / package)
            paths.insert(0, str(work / "pkgs"))
        if os.environ.get("CONVEYOR_SRC"):  # measure another checkout (e.g. an older commit)
            paths.insert(0, os.environ["CONVEYOR_SRC"])
    return paths


def run(name: str, side: str, args: argparse.Namespace) -> None:
    results: Path = args.results
    work = results / "work" / name / side
    paths = prepare(name, side, args.dir / name, work, args.mode)
    cwd = work / "root" / RUN_FROM.get(name, ".")
    prefix = RUN_FROM.get(name, "")
    targets = [t.removeprefix(prefix + "/") if prefix else t for t in SUITES[name][0]]
    xml = results / f"{side}-{name}.xml"
    command = [sys.executable, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider"]
    command += ["-o", "addopts=", "--timeout=300", f"--junitxml={xml}", *args.pytest_args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    print(f"== {side}: {name}", file=sys.stderr)
    with open(results / f"{side}-{name}.log", "w") as log:
        subprocess.run(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--only", nargs="*", default=list(SUITES))
    parser.add_argument("--sides", nargs="*", default=["torch", "conveyor"])
    parser.add_argument("--mode", choices=["all", "tests"], default="all")
    parser.add_argument("--results", type=Path)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    args.dir = args.dir.resolve()
    args.results = (args.results or args.dir / "results").resolve()
    args.results.mkdir(parents=True, exist_ok=True)
    for side in args.sides:
        for name in args.only:
            run(name, side, args)
    return report.report(args.results, list(args.only))


if __name__ == "__main__":
    sys.exit(main())
