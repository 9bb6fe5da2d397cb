"""Cost of the always-on counters (StepClock) per batch, S1/S2 shapes, on vs off.

Interleaved (ABBA) in one process: "off" replaces the clock's two calls with no-ops.

    python benchmarks/stats_overhead.py --reps 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from conveyor import DataLoader
from conveyor.stats.counters import StepClock


class Images:
    def __init__(self, n: int):
        self.item = torch.zeros(3, 224, 224, dtype=torch.uint8)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.item


def _per_batch_us(loader: DataLoader[Any]) -> float:
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    count = 0
    for _ in it:
        count += 1
    return (time.perf_counter() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    enter, leave = StepClock.enter, StepClock.leave
    scenarios = {
        "S2 ints bs1 nw0": lambda: DataLoader(list(range(20000)), batch_size=1),
        "S2 ints bs1 nw2": lambda: DataLoader(list(range(20000)), batch_size=1, num_workers=2),
        "S2 ints bs32 nw2": lambda: DataLoader(list(range(64000)), batch_size=32, num_workers=2),
        "S1 images bs64 nw2": lambda: DataLoader(Images(64 * 60), batch_size=64, num_workers=2),
    }
    for name, make in scenarios.items():
        on: list[float] = []
        off: list[float] = []
        for rep in range(args.reps):
            order = [True, False] if rep % 2 == 0 else [False, True]
            for counters in order:
                if counters:
                    StepClock.enter, StepClock.leave = enter, leave  # type: ignore[method-assign]
                    on.append(_per_batch_us(make()))
                else:
                    StepClock.enter = lambda self: 0.0  # type: ignore[method-assign,assignment]
                    StepClock.leave = lambda self, entered, samples: None  # type: ignore[method-assign,assignment]
                    off.append(_per_batch_us(make()))
        StepClock.enter, StepClock.leave = enter, leave  # type: ignore[method-assign]
        overhead = statistics.median(a / b - 1 for a, b in zip(on, off, strict=True))
        print(
            f"{name:22} on {statistics.median(on):9.2f} us/batch  off "
            f"{statistics.median(off):9.2f}  overhead {overhead:+.1%} (median of paired ratios)"
        )


if __name__ == "__main__":
    main()
