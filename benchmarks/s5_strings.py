"""S5 copy-on-read: peak memory of one shuffled epoch over N short strings, by holder.

Each configuration runs in a fresh interpreter (fork workers inherit only what it built),
configurations interleaved ABBA-style across repetitions. A thread samples the proportional
set size (PSS: shared pages split between the processes that map them) of the process and
its children every 50 ms from /proc/PID/smaps_rollup; the figure is the peak of the sum.

    python benchmarks/s5_strings.py --n 5000000 --reps 2

Configurations (2 workers, batch 1024, collate returns the batch's length):
``torch numpy`` (the reference: one fixed-width NumPy ``S`` array), ``torch list``,
``conveyor list``, ``conveyor StringTable``, and thread workers over the list, the
StringTable and the NumPy array.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

CONFIGS = {
    "torch numpy": ("torch", "numpy", "process"),
    "torch list": ("torch", "list", "process"),
    "conveyor list": ("conveyor", "list", "process"),
    "conveyor StringTable": ("conveyor", "table", "process"),
    "conveyor list, threads": ("conveyor", "list", "thread"),
    "conveyor StringTable, threads": ("conveyor", "table", "thread"),
    "conveyor numpy, threads": ("conveyor", "numpy", "thread"),
}

CHILD = textwrap.dedent(
    """
    import gc, json, os, threading, time
    import numpy as np, torch
    import torch.utils.data as tud
    import conveyor

    def pss_of_tree():
        pids = [os.getpid()]
        try:
            with open(f"/proc/{{os.getpid()}}/task/{{os.getpid()}}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            pass
        total = 0
        for pid in pids:
            try:
                with open(f"/proc/{{pid}}/smaps_rollup") as f:
                    for line in f:
                        if line.startswith("Pss:"):
                            total += int(line.split()[1]) * 1024
                            break
            except OSError:
                pass
        return total

    class Strings:
        def __init__(self, items, decode):
            self.items, self.decode = items, decode
        def __len__(self):
            return len(self.items)
        def __getitem__(self, i):
            item = self.items[i]
            return item.decode("ascii") if self.decode else item

    n, holder = {n}, {holder!r}
    names = [f"sample-{{i:012d}}" for i in range(n)]
    if holder == "numpy":
        items = np.array(names, dtype="S20")
        del names
    elif holder == "table":
        items = conveyor.StringTable(names)
        del names
    else:
        items = names
    gc.collect()
    dataset = Strings(items, holder == "numpy")
    module = conveyor if {loader!r} == "conveyor" else tud
    kwargs = dict(batch_size=1024, shuffle=True, num_workers=2, collate_fn=len,
                  generator=torch.Generator().manual_seed(0))
    if {kind!r} == "thread":
        kwargs["worker_type"] = "thread"
    before = pss_of_tree()
    peak = [before]
    done = threading.Event()
    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], pss_of_tree())
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    seen = sum(module.DataLoader(dataset, **kwargs))
    done.set()
    sampler.join()
    assert seen == n, seen
    print(json.dumps({{"before_mib": before / 2**20, "peak_mib": peak[0] / 2**20}}))
    """
)


def _measure(name: str, n: int) -> dict[str, float]:
    loader, holder, kind = CONFIGS[name]
    code = CHILD.format(n=n, holder=holder, loader=loader, kind=kind)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5_000_000)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    names = list(CONFIGS)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for rep in range(args.reps):
        for name in names if rep % 2 == 0 else reversed(names):
            runs[name].append(_measure(name, args.n))
            print(f"rep {rep + 1}: {name} {runs[name][-1]}", file=sys.stderr, flush=True)
    reference = [r["peak_mib"] for r in runs["torch numpy"]]
    print(f"S5: {args.n:,} strings, 2 workers, {args.reps} reps, load {os.getloadavg()[0]:.1f}")
    print("| loader, holder | peak total PSS MiB | before loader MiB | x torch numpy (paired) |")
    print("|---|---|---|---|")
    for name in names:
        peaks = [r["peak_mib"] for r in runs[name]]
        ratio = statistics.median(p / q for p, q in zip(peaks, reference, strict=True))
        before = statistics.median(r["before_mib"] for r in runs[name])
        print(f"| {name} | {statistics.median(peaks):,.0f} | {before:,.0f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
