"""S2 tiny items: wall time *and CPU time* per batch, conveyor vs torch, 2 workers.

On a shared 2-core machine the wall time of a tiny batch swings with where the scheduler
puts the three processes (90-150 us for one build), while the CPU each process spends per
batch stays put: that is the figure to compare builds with. Each measurement is a fresh
interpreter; loaders alternate ABBA. CPU is user+system of the main process and of each
worker over the measured batches (psutil), divided by the number of batches.

    python benchmarks/s2_cpu.py --reps 4 --batches 5000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, time, psutil, torch
    import torch.utils.data as tud
    import conveyor

    class Numbers(conveyor.Dataset):
        def __len__(self):
            return 10**9
        def __getitem__(self, index):
            return index

    module = conveyor if {loader!r} == "conveyor" else tud
    iterator = iter(module.DataLoader(Numbers(), batch_size={batch_size}, num_workers=2))
    for _ in range(20):
        next(iterator)
    me = psutil.Process()
    processes = [me, *me.children()]
    def cpu():
        return [sum(p.cpu_times()[:2]) for p in processes]
    cpu0 = cpu()
    start = time.perf_counter()
    for _ in range({batches}):
        batch = next(iterator)
    wall = time.perf_counter() - start
    cpu1 = cpu()
    assert batch.shape == ({batch_size},)
    used = [(b - a) / {batches} * 1e6 for a, b in zip(cpu0, cpu1)]
    print(json.dumps({{"wall_us": wall / {batches} * 1e6, "main_cpu_us": used[0],
                      "workers_cpu_us": sum(used[1:])}}))
    """
)


def _measure(loader: str, batch_size: int, batches: int) -> dict[str, float]:
    code = CHILD.format(loader=loader, batch_size=batch_size, batches=batches)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--batches", type=int, default=5000)
    parser.add_argument("--batch-sizes", default="1,32")
    args = parser.parse_args()
    print(f"S2 ints, 2 workers, {args.batches} batches, {args.reps} reps each (ABBA)")
    print("| loader | batch | wall us/batch [min-max] | main CPU us/batch | workers CPU us/batch |")
    print("|---|---|---|---|---|")
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        runs: dict[str, list[dict[str, float]]] = {"conveyor": [], "torch": []}
        for rep in range(args.reps):
            order = ["conveyor", "torch"] if rep % 2 == 0 else ["torch", "conveyor"]
            for loader in order:
                runs[loader].append(_measure(loader, batch_size, args.batches))
        for loader, rows in runs.items():
            wall = [r["wall_us"] for r in rows]
            main_cpu = statistics.median(r["main_cpu_us"] for r in rows)
            workers_cpu = statistics.median(r["workers_cpu_us"] for r in rows)
            print(
                f"| {loader} | {batch_size} | {statistics.median(wall):.1f} "
                f"[{min(wall):.1f}-{max(wall):.1f}] | {main_cpu:.1f} | {workers_cpu:.1f} |"
            )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
