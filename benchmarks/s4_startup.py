"""S4: time from ``iter(loader)`` to the first batch, conveyor vs torch.utils.data.

Each measurement runs in a fresh Python process (cold: imports done, nothing started),
alternating conveyor and torch. ``--fat-mb`` adds a payload that pickles to that size.

    python benchmarks/s4_startup.py --reps 3
    python benchmarks/s4_startup.py --fat-mb 50 --num-workers 4 --contexts spawn
    python benchmarks/s4_startup.py --contexts spawn,forkserver --build-s 1.5

``--build-s`` spends that long busy on one core between ``DataLoader(...)`` and ``iter()``
(the model being built, as in a real script); "cold" is then measured from ``iter()``.
``--script`` runs each measurement as a script file instead of ``python -c``: spawn and
forkserver workers (conveyor's zygote) then import that script as a real training script's
workers would (its imports run again there).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Comparison, interleave, print_table

CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {bench_dir!r})
    import numpy as np, torch
    import torch.utils.data as tud
    import conveyor
    from startup_dataset import FatRange
    module = conveyor if {ours!r} else tud
    kwargs = dict(batch_size=8, num_workers={workers})
    if {context!r} == "thread":
        kwargs["worker_type"] = "thread"
    elif {context!r}:
        kwargs["multiprocessing_context"] = {context!r}
    if __name__ == "__main__":  # spawn workers (and conveyor's zygote) import a script
        dataset = FatRange(1024, {fat_mb})
        start = time.perf_counter()
        loader = module.DataLoader(dataset, persistent_workers={persistent}, **kwargs)
        if {build_s}:
            busy_until = time.perf_counter() + {build_s}
            while time.perf_counter() < busy_until:  # building the model: one core busy
                pass
            start = time.perf_counter()
        it = iter(loader)
        next(it)
        first = time.perf_counter() - start
        for _ in it:
            pass
        start = time.perf_counter()
        next(iter(loader))
        second = time.perf_counter() - start
        print(first, second)
    """
)


def _measure(
    ours: bool,
    context: str,
    workers: int,
    fat_mb: int,
    persistent: bool,
    build_s: float = 0.0,
    script: bool = False,
) -> tuple[float, float]:
    code = CHILD.format(
        build_s=build_s,
        persistent=persistent,
        bench_dir=str(Path(__file__).resolve().parent),
        ours=ours,
        context=context,
        workers=workers,
        fat_mb=fat_mb,
    )
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-c", code]
        if script:
            path = Path(tmp) / "train.py"
            path.write_text(code)
            command = [sys.executable, str(path)]
        out = subprocess.run(
            command, capture_output=True, text=True, timeout=600, check=True
        ).stdout
    first, second = out.split()
    return float(first), float(second)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--fat-mb", type=int, default=0)
    parser.add_argument("--contexts", default="fork,forkserver,spawn,thread")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--build-s",
        type=float,
        default=0.0,
        help="seconds of busy work between DataLoader(...) and iter() (cold counts from iter)",
    )
    parser.add_argument(
        "--script", action="store_true", help="run each measurement as a script file"
    )
    parser.add_argument(
        "--no-persistent",
        action="store_true",
        help="measure non-persistent workers: epoch 2 starts new workers",
    )
    args = parser.parse_args()
    rows = []
    for context in args.contexts.split(","):
        # torch has no thread workers: compare those with its best, fork
        theirs_context = "fork" if context == "thread" else context
        kind = "non-persistent" if args.no_persistent else "persistent"
        epoch2 = Comparison(f"{context} epoch-2 first batch ({kind})", "s")
        after = f", after {args.build_s:g} s of model building" if args.build_s else ""
        cold = Comparison(
            f"{context} cold first batch ({args.num_workers}w, {args.fat_mb} MB{after})", "s"
        )
        results_ours: list[tuple[float, float]] = []
        results_theirs: list[tuple[float, float]] = []

        def ours(context: str = context, out: list[tuple[float, float]] = results_ours) -> float:
            out.append(
                _measure(
                    True,
                    context,
                    args.num_workers,
                    args.fat_mb,
                    not args.no_persistent,
                    args.build_s,
                    args.script,
                )
            )
            return out[-1][0]

        def theirs(
            context: str = theirs_context, out: list[tuple[float, float]] = results_theirs
        ) -> float:
            out.append(
                _measure(
                    False,
                    context,
                    args.num_workers,
                    args.fat_mb,
                    not args.no_persistent,
                    args.build_s,
                    args.script,
                )
            )
            return out[-1][0]

        a, b = interleave(args.reps, ours, theirs)
        for x, y in zip(a, b, strict=True):
            cold.add(x, y)
        for x, y in zip(results_ours, results_theirs, strict=True):
            epoch2.add(x[1], y[1])
        rows += [cold, epoch2]
        print_table([cold, epoch2])
        print()
    print_table(rows, args.json)


if __name__ == "__main__":
    main()
