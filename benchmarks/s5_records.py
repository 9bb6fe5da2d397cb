"""S5 records: peak memory of one shuffled epoch over N (path, label) records, by holder.

The dataset holds its records as a plain Python list of ``(str, int)`` tuples (what an
ImageFolder-style file list looks like, no user code change), or as two NumPy arrays
(fixed-width ``S`` paths and ``int64`` labels: the reference, no object per record).
Each configuration runs in a fresh interpreter, configurations interleaved ABBA-style
across repetitions. A thread samples the proportional set size (PSS: shared pages split
between the processes that map them) and the unique set size (USS) of the process and
its children every 50 ms from /proc/PID/smaps_rollup; a sample during which a child
started or ended is dropped (its shared pages would be counted at two mapcounts: up to
a third of the list too much with 2 workers).

    python benchmarks/s5_records.py --n 5000000 --reps 2

Configurations (2 workers, batch 1024, collate returns the batch's length):
``torch numpy`` (reference), ``torch list``, ``conveyor list`` (shared automatically),
``conveyor list, share_records=False`` (torch's behaviour), ``conveyor list, threads``
and ``conveyor numpy, threads``. Reported per configuration (MiB, medians): the peak of
the tree's PSS, the PSS before the loader existed, the largest worker's peak USS, the
DataLoader constructor's time (where the table is built) and the paired ratio of the peak
to the reference's.
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
    "torch numpy": ("torch", "numpy", "process", True),
    "torch list": ("torch", "list", "process", True),
    "conveyor list": ("conveyor", "list", "process", True),
    "conveyor list, share_records=False": ("conveyor", "list", "process", False),
    "conveyor list, threads": ("conveyor", "list", "thread", True),
    "conveyor numpy, threads": ("conveyor", "numpy", "thread", True),
}

CHILD = textwrap.dedent(
    """
    import gc, json, os, threading, time
    import numpy as np, torch
    import torch.utils.data as tud
    import conveyor

    def rollup(pid):
        out = {{"pss": 0, "uss": 0}}
        try:
            with open(f"/proc/{{pid}}/smaps_rollup") as f:
                for line in f:
                    key, value = line.split()[:2]
                    if key == "Pss:":
                        out["pss"] = int(value) * 1024
                    elif key in ("Private_Clean:", "Private_Dirty:"):
                        out["uss"] += int(value) * 1024
        except OSError:
            pass
        return out

    def children():
        me = os.getpid()
        try:
            with open(f"/proc/{{me}}/task/{{me}}/children") as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            return []

    class Records:
        def __init__(self, paths, labels, holder):
            self.holder = holder
            if holder == "list":
                self.samples = list(zip(paths, labels))
            else:
                self.paths = np.array(paths, dtype="S")
                self.labels = np.array(labels, dtype=np.int64)
        def __len__(self):
            return len(self.samples) if self.holder == "list" else len(self.labels)
        def __getitem__(self, i):
            if self.holder == "list":
                path, label = self.samples[i]
            else:
                path, label = self.paths[i].decode(), int(self.labels[i])
            return path, label

    n, holder = {n}, {holder!r}
    paths = [f"/data/train/n{{i % 1000:08d}}/img_{{i:09d}}.JPEG" for i in range(n)]
    labels = [i % 1000 for i in range(n)]
    dataset = Records(paths, labels, holder)
    del paths, labels
    gc.collect()
    module = conveyor if {loader!r} == "conveyor" else tud
    kwargs = dict(batch_size=1024, shuffle=True, num_workers=2, collate_fn=len,
                  generator=torch.Generator().manual_seed(0))
    if {loader!r} == "conveyor":
        kwargs["share_records"] = {share}
    if {kind!r} == "thread":
        kwargs["worker_type"] = "thread"
    before = rollup(os.getpid())["pss"]
    start = time.perf_counter()
    loader = module.DataLoader(dataset, **kwargs)
    construct_s = time.perf_counter() - start
    peak = {{"pss": before, "worker_uss": 0}}
    done = threading.Event()
    def sample():
        while not done.wait(0.05):
            pids = children()
            main = rollup(os.getpid())["pss"]
            kids = [rollup(p) for p in pids]
            if children() != pids:
                # a fork between the reads counts shared pages at two mapcounts (overcount)
                continue
            total = main + sum(k["pss"] for k in kids)
            peak["pss"] = max(peak["pss"], total)
            peak["worker_uss"] = max([peak["worker_uss"]] + [k["uss"] for k in kids])
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    seen = sum(loader)
    epoch_s = time.perf_counter() - start
    done.set()
    sampler.join()
    assert seen == n, seen
    print(json.dumps({{"before_mib": before / 2**20, "peak_mib": peak["pss"] / 2**20,
                      "worker_uss_mib": peak["worker_uss"] / 2**20,
                      "construct_s": construct_s, "epoch_s": epoch_s}}))
    """
)


def _measure(name: str, n: int) -> dict[str, float]:
    loader, holder, kind, share = CONFIGS[name]
    code = CHILD.format(n=n, holder=holder, loader=loader, kind=kind, share=share)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=900, check=True
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5_000_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--configs", default=";".join(CONFIGS), help="names, separated by ;")
    args = parser.parse_args()
    names = [name for name in CONFIGS if name in args.configs.split(";")]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    loads = [os.getloadavg()[0]]
    for rep in range(args.reps):
        for name in names if rep % 2 == 0 else reversed(names):
            runs[name].append(_measure(name, args.n))
            print(f"rep {rep + 1}: {name} {runs[name][-1]}", file=sys.stderr, flush=True)
        loads.append(os.getloadavg()[0])
    reference = [r["peak_mib"] for r in runs.get("torch numpy", [])]
    print(
        f"S5 records: {args.n:,} (path, label) records, 2 workers, {args.reps} reps, "
        f"load average {min(loads):.1f}-{max(loads):.1f}"
    )
    print(
        "| loader, holder | peak total PSS MiB | before loader MiB | peak - before MiB "
        "| largest worker USS MiB | constructor s | epoch s | x torch numpy (paired) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        rs = runs[name]
        peaks = [r["peak_mib"] for r in rs]
        ratio = (
            f"{statistics.median(p / q for p, q in zip(peaks, reference, strict=True)):.2f}"
            if reference
            else "-"
        )
        med = {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        print(
            f"| {name} | {med['peak_mib']:,.0f} | {med['before_mib']:,.0f} "
            f"| {med['peak_mib'] - med['before_mib']:,.0f} | {med['worker_uss_mib']:,.1f} "
            f"| {med['construct_s']:.2f} | {med['epoch_s']:.2f} | {ratio} |"
        )


if __name__ == "__main__":
    main()
