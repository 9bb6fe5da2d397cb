"""S4's import cost: ``import conveyor`` on top of ``import torch``, in fresh interpreters.

Every measurement is a new ``python -c`` that imports torch (not timed), then times
``import conveyor``. torch's counterpart is ``import torch.utils.data``, which ``import torch``
has already done, so its cost is ~0: conveyor's figure is measured against the 50 ms budget
of issue 17, with ``import torch`` itself (also printed) as the scale. Variants alternate:

- ``pyc``: the byte-code caches exist (a wheel install, or ``scripts/setup.sh``).
- ``no pyc``: a copy of ``src/`` without caches, imported with ``-B``, so every conveyor
  module is compiled on each import (an editable install under PYTHONDONTWRITEBYTECODE).

    python benchmarks/import_time.py --reps 9
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
CHILD = """
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import {module}
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def _measure(module: str, extra_path: str | None) -> tuple[float, float]:
    env = dict(os.environ)
    argv = [sys.executable]
    if extra_path is not None:
        env["PYTHONPATH"] = extra_path
        argv.append("-B")
    code = CHILD.format(module=module)
    out = subprocess.run(
        [*argv, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True
    ).stdout
    torch_s, module_s = out.split()
    return float(torch_s), float(module_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(SRC)], check=True)
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "src"
        shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
        variants = {
            "conveyor (pyc)": ("conveyor", None),
            "conveyor (no pyc)": ("conveyor", str(copy)),
            "torch.utils.data": ("torch.utils.data", None),
        }
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        order = list(variants)
        for rep in range(args.reps):
            for name in order if rep % 2 == 0 else reversed(order):
                samples[name].append(_measure(*variants[name]))
    load = os.getloadavg()[0]
    print(f"import time after `import torch`, {args.reps} fresh interpreters each, load {load:.1f}")
    print(f"{'module':<20} {'median ms':>10} {'[min-max] ms':>16} {'import torch s':>15}")
    for name, rows in samples.items():
        module_ms = [m * 1e3 for _, m in rows]
        torch_s = statistics.median(t for t, _ in rows)
        spread = f"[{min(module_ms):.1f}-{max(module_ms):.1f}]"
        print(f"{name:<20} {statistics.median(module_ms):>10.1f} {spread:>16} {torch_s:>15.2f}")


if __name__ == "__main__":
    main()
