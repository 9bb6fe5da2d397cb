"""S4 records: first batch after ``iter()`` with spawn workers, by size of a plain record list.

The dataset holds N ``(path, label)`` records as a plain Python list (no user code
change). Each measurement runs in a fresh interpreter: build the list, build the
DataLoader (batch 64; conveyor builds its shared table here), spend ``--build-s`` seconds busy on
one core (the model being built: conveyor's zygote imports torch meanwhile), then time
``iter()`` to the first batch, and the first batch of a second epoch (non-persistent
workers: new workers). conveyor and torch alternate; torch runs only up to
``--torch-max-n`` records (each of its workers unpickles the whole list: 8 workers x
10 M records would need ~10 GB).

    python benchmarks/s4_records_startup.py --reps 3
    python benchmarks/s4_records_startup.py --reps 3 --shuffle
    python benchmarks/s4_records_startup.py --sizes 1200000 --num-workers 8 --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {bench_dir!r})
    import torch
    import torch.utils.data as tud
    import conveyor
    from startup_dataset import Records

    if __name__ == "__main__":
        module = conveyor if {ours!r} else tud
        dataset = Records({n})
        start = time.perf_counter()
        loader = module.DataLoader(dataset, batch_size=64, shuffle={shuffle},
                                   num_workers={workers}, multiprocessing_context={context!r})
        construct = time.perf_counter() - start
        busy_until = time.perf_counter() + {build_s}
        while time.perf_counter() < busy_until:  # building the model: one core busy
            pass
        start = time.perf_counter()
        it = iter(loader)
        next(it)
        first = time.perf_counter() - start
        del it
        start = time.perf_counter()
        next(iter(loader))
        second = time.perf_counter() - start
        print(construct, first, second)
    """
)


def _measure(ours: bool, n: int, args: argparse.Namespace) -> tuple[float, float, float]:
    code = CHILD.format(
        bench_dir=str(Path(__file__).resolve().parent),
        ours=ours,
        n=n,
        workers=args.num_workers,
        context=args.context,
        build_s=args.build_s,
        shuffle=args.shuffle,
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=900, check=True
    ).stdout
    construct, first, second = (float(x) for x in out.split()[-3:])
    return construct, first, second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1200000,2500000,5000000,10000000")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--num-workers", type=int, default=8)
    parser.add_argument("--context", default="spawn")
    parser.add_argument("--build-s", type=float, default=2.0)
    parser.add_argument("--torch-max-n", type=int, default=1_200_000)
    parser.add_argument(
        "--shuffle",
        action="store_true",
        help="RandomSampler: iter() then also waits for torch.randperm(n) (torch's too)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    loads = [os.getloadavg()[0]]
    for n in (int(s) for s in args.sizes.split(",")):
        ours: list[tuple[float, float, float]] = []
        theirs: list[tuple[float, float, float]] = []
        for rep in range(args.reps):
            order = [True, False] if rep % 2 == 0 else [False, True]
            for mine in order:
                if mine:
                    ours.append(_measure(True, n, args))
                elif n <= args.torch_max_n:
                    theirs.append(_measure(False, n, args))
            print(f"n={n} rep {rep + 1}: conveyor {ours[-1]} torch {theirs[-1:]}", file=sys.stderr)
            loads.append(os.getloadavg()[0])
        row = {"n": n, "conveyor": [statistics.median(c) for c in zip(*ours, strict=True)]}
        if theirs:
            row["torch"] = [statistics.median(c) for c in zip(*theirs, strict=True)]
            row["first_ratio"] = statistics.median(
                t[1] / o[1] for o, t in zip(ours, theirs, strict=True)
            )
        rows.append(row)
    print(
        f"S4 records: {args.context}, {args.num_workers} workers, {args.build_s:g} s of model "
        f"building, shuffle={args.shuffle}, {args.reps} reps, "
        f"load average {min(loads):.1f}-{max(loads):.1f}"
    )
    print(
        "| records | constructor s: conveyor / torch | first batch after iter() s: conveyor "
        "/ torch | torch / conveyor | epoch 2 first batch s: conveyor / torch |"
    )
    print("|---|---|---|---|---|")
    for row in rows:
        c = row["conveyor"]
        t = row.get("torch")
        ts = t if t else ["-", "-", "-"]
        ratio = f"{row['first_ratio']:.1f}x" if t else "-"
        print(
            f"| {row['n']:,} | {c[0]:.2f} / {_fmt(ts[0])} | {c[1]:.3f} / {_fmt(ts[1])} "
            f"| {ratio} | {c[2]:.3f} / {_fmt(ts[2])} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def _fmt(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.3f}"


if __name__ == "__main__":
    main()
