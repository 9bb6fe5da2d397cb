#!/usr/bin/env python
"""What conveyor.to_device costs the CPU per batch, measured without a GPU.

``to_device(loader, "cpu", depth=2)`` runs the wrapper's own work (a state snapshot per
batch pulled, the structure walk, the queue) with no copies, so its time over a plain
iteration of the same loader is the wrapper's overhead per batch. Small batches (``--batch``
dicts of a 16-float tensor and an int) make the loader's own cost small, so the overhead
shows. Interleaved, medians over ``--reps``; ``state_dict()`` of the loader timed alone.

    python benchmarks/device_prefetch_overhead.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import torch

import conveyor


class Small(conveyor.Dataset[dict[str, Any]]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": torch.full((16,), float(i)), "i": i}


def per_batch_us(iterable: Any, batches: int) -> float:
    iterator = iter(iterable)
    next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return (time.perf_counter() - start) / batches * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)

    def loader() -> conveyor.DataLoader[Any]:
        return conveyor.DataLoader(Small(args.batch * (args.batches + 8)), batch_size=args.batch,
                                   num_workers=args.workers)  # fmt: skip

    configs = {
        "plain": loader,
        "to_device depth=0": lambda: conveyor.to_device(loader(), "cpu", depth=0),
        "to_device depth=2": lambda: conveyor.to_device(loader(), "cpu", depth=2),
    }
    times: dict[str, list[float]] = {name: [] for name in configs}
    print(f"load average {os.getloadavg()}")
    for rep in range(args.reps):
        for name in list(configs) if rep % 2 == 0 else list(configs)[::-1]:
            times[name].append(per_batch_us(configs[name](), args.batches))
    plain = statistics.median(times["plain"])
    for name, values in times.items():
        extra = statistics.median(values) - plain
        print(f"{name:18s} {statistics.median(values):7.1f} us/batch  (+{extra:.1f} over plain)")
    state_loader = loader()
    iterator = iter(state_loader)
    next(iterator)
    start = time.perf_counter()
    for _ in range(10000):
        state_loader.state_dict()
    print(f"loader.state_dict() {(time.perf_counter() - start) / 10000 * 1e6:.1f} us")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
