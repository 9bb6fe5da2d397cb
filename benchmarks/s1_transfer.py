"""S1 transfer: moving in-memory uint8 3x224x224 batches from workers to the training loop.

Map-style dataset holding 256 distinct samples (tensors, or NumPy arrays with
``--variants numpy``); item i is sample i % 256 with byte 0 stamped i % 256, and every
measured batch's stamps are checked. The consumer reads one byte per 4 KiB page of each
batch (what a pinned copy or an H2D transfer must do at least). conveyor and
torch.utils.data run interleaved (ABBA) in this process tree; each line reports medians
of MB/s over repetitions, the median paired ratio, and CPU seconds per GB of the whole
process tree. ``memcpy_warm`` copies one batch of the dataset's bytes into an already
faulted-in buffer on one core: the cost of the single copy a loader must make.

    python benchmarks/s1_transfer.py                       # bs 64,128; nw 0,1,2; 5 reps
    python benchmarks/s1_transfer.py --quick --workers 2   # a fast look
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
import torch.utils.data as tud

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conveyor
from harness import Comparison

SHAPE = (3, 224, 224)
SAMPLE_BYTES = math.prod(SHAPE)
POOL = 256
PAGE = 4096


class ImagePool:
    """Map-style, in memory: item i is a view of pool[i % 256], byte 0 stamped i % 256."""

    def __init__(self, length: int, kind: str):
        rng = np.random.default_rng(0)
        pool = rng.integers(0, 255, size=(POOL, *SHAPE), dtype=np.uint8)
        pool.reshape(POOL, -1)[:, 0] = np.arange(POOL)
        self.length = length
        self.pool: Any = torch.from_numpy(pool) if kind == "tensor" else pool

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> Any:
        return self.pool[i % POOL]


def touch(batch: Any) -> int:
    """Read one byte per 4 KiB page; returns a checksum so the reads cannot be skipped."""
    array = batch.numpy() if isinstance(batch, torch.Tensor) else np.asarray(batch)
    return int(array.reshape(-1)[::PAGE].sum())


def stamps_ok(batch: Any, first: int) -> bool:
    array = batch.numpy() if isinstance(batch, torch.Tensor) else np.asarray(batch)
    stamps = array.reshape(array.shape[0], -1)[:, 0]
    return bool(np.array_equal(stamps, (np.arange(first, first + len(stamps)) % POOL)))


def tree_cpu_s() -> float:
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def run_loader(ours: bool, dataset: ImagePool, bs: int, nw: int, batches: int) -> dict[str, Any]:
    module: Any = conveyor if ours else tud
    loader = module.DataLoader(dataset, batch_size=bs, num_workers=nw)
    it = iter(loader)
    warm = 2 * nw + 2
    # the workers keep 2 batches each in flight and go on making them during the warm-up:
    # a measured run shorter than a few times that would time batches already made
    batches = max(batches, 8 * nw)
    for _ in range(warm):
        touch(next(it))
    cpu0, t0 = tree_cpu_s(), time.perf_counter()
    bad = 0
    for k in range(batches):
        batch = next(it)
        touch(batch)
        bad += not stamps_ok(batch, (warm + k) * bs)
    seconds = time.perf_counter() - t0
    cpu = tree_cpu_s() - cpu0
    del batch, it, loader
    nbytes = batches * bs * SAMPLE_BYTES
    return {"MB_s": nbytes / seconds / 1e6, "cpu_s_per_GB": cpu / (nbytes / 1e9), "bad": bad}


def run_memcpy(dataset: ImagePool, bs: int, batches: int) -> dict[str, Any]:
    pool = np.asarray(dataset.pool)
    sources = [pool[j : j + bs] for j in range(0, POOL - bs + 1, bs)]
    target = np.empty((bs, *SHAPE), dtype=np.uint8)
    np.copyto(target, sources[0])
    t0 = time.perf_counter()
    for k in range(batches):
        np.copyto(target, sources[k % len(sources)])
        touch(target)
    seconds = time.perf_counter() - t0
    return {"MB_s": batches * bs * SAMPLE_BYTES / seconds / 1e6, "cpu_s_per_GB": None, "bad": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="64,128")
    parser.add_argument("--workers", default="0,1,2")
    parser.add_argument("--variants", default="tensor,numpy")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--target-mb", type=float, default=600, help="bytes per measurement")
    parser.add_argument("--quick", action="store_true", help="3 reps, 300 MB per measurement")
    parser.add_argument("--out", help="append JSON lines to this file")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.target_mb = 3, 300
    torch.set_num_threads(1)
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    workers = [int(x) for x in args.workers.split(",")]
    variants = args.variants.split(",")
    plan = {bs: max(8, math.ceil(args.target_mb * 1e6 / (bs * SAMPLE_BYTES))) for bs in sizes}
    length = max((2 * max(workers) + 2 + plan[bs] + 8) * bs for bs in sizes)
    datasets = {v: ImagePool(length, v) for v in variants}

    configs = [("memcpy", variants[0], bs, 0) for bs in sizes]
    configs += [(lib, v, bs, nw) for bs in sizes for v in variants for nw in workers
                for lib in ("conveyor", "torch")]  # fmt: skip
    results: dict[tuple[Any, ...], list[dict[str, Any]]] = {c: [] for c in configs}
    for rep in range(args.reps):
        order = configs if rep % 2 == 0 else configs[::-1]
        for config in order:
            lib, variant, bs, nw = config
            if lib == "memcpy":
                out = run_memcpy(datasets[variant], bs, plan[bs])
            else:
                out = run_loader(lib == "conveyor", datasets[variant], bs, nw, plan[bs])
            results[config].append(out)
        print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
    report(configs, results, args.out, args.reps)


def report(
    configs: list[tuple[Any, ...]],
    results: dict[tuple[Any, ...], list[dict[str, Any]]],
    out: str | None,
    reps: int,
) -> None:
    lines = []
    print(
        "| variant | bs | nw | conveyor MB/s | torch MB/s | conveyor/torch | "
        "conveyor x memcpy | CPU s/GB conveyor | CPU s/GB torch | bad |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for lib, variant, bs, nw in configs:
        if lib != "conveyor":
            continue
        ours = results[(lib, variant, bs, nw)]
        theirs = results[("torch", variant, bs, nw)]
        memcpy = next(v for k, v in results.items() if k[0] == "memcpy" and k[2] == bs)
        rate = Comparison(f"S1 {variant} bs{bs} nw{nw}", "MB/s", higher_is_better=True)
        vs_memcpy = Comparison("memcpy", "MB/s", higher_is_better=True)
        for a, b, m in zip(ours, theirs, memcpy, strict=True):
            rate.add(a["MB_s"], b["MB_s"])
            vs_memcpy.add(a["MB_s"], m["MB_s"])
        row = rate.row()
        row.update(
            variant=variant,
            batch_size=bs,
            num_workers=nw,
            ratio_vs_memcpy_warm=vs_memcpy.ratio(),
            memcpy_MB_s=statistics.median(m["MB_s"] for m in memcpy),
            cpu_s_per_GB_conveyor=statistics.median(a["cpu_s_per_GB"] for a in ours),
            cpu_s_per_GB_torch=statistics.median(b["cpu_s_per_GB"] for b in theirs),
            bad=sum(a["bad"] + b["bad"] for a, b in zip(ours, theirs, strict=True)),
        )
        lines.append(row)
        print(
            f"| {variant} | {bs} | {nw} | {row['conveyor']:.0f} | {row['torch']:.0f} | "
            f"{row['advantage']:.2f}x | {row['ratio_vs_memcpy_warm']:.2f} | "
            f"{row['cpu_s_per_GB_conveyor']:.2f} | {row['cpu_s_per_GB_torch']:.2f} | "
            f"{row['bad']} |"
        )
    for bs in sorted({c[2] for c in configs}):
        memcpy = next(v for k, v in results.items() if k[0] == "memcpy" and k[2] == bs)
        print(f"memcpy_warm bs{bs}: {statistics.median(m['MB_s'] for m in memcpy):.0f} MB/s")
    print(f"({reps} interleaved repetitions; medians; ratio = median of paired ratios)")
    if out:
        with open(out, "a") as fh:
            for row in lines:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
