"""Cost of the counters issue 30 added (always on), per batch, on vs off, S1/S2 shapes.

Added per batch: in the worker its CPU time (a ``thread_time()`` read at most every 5 ms:
the call is a system call of about 1 us) and two ``perf_counter()`` reads around
``collate_fn``; in the main process three more counters in ``StepClock.worker_did``, the
wait on ready batches and the results held behind a slow one. "Off" replaces them (in the
main process and, inherited through fork, in the workers) with the code as it was before.
Interleaved (ABBA) in one process, medians of paired ratios.

    python benchmarks/doctor_counters.py --reps 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from conveyor import DataLoader
from conveyor.engine.workers import fetch, worker_loop
from conveyor.stats.counters import StepClock


class Images:
    def __init__(self, n: int):
        self.item = torch.zeros(3, 224, 224, dtype=torch.uint8)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.item


def _no_cpu_reads(self: Any, now: float) -> float:
    return 0.0


def _untimed_collate(self: Any, samples: Any) -> Any:
    return self.collate_fn(samples)


def _old_worker_did(
    self: StepClock, worker_id: int, busy_s: float, cpu_s: float = 0.0, collate_s: float = 0.0
) -> None:
    """Before: two counters per worker (the snapshot's other fields are left at 0)."""
    counts = self._workers.get(worker_id)
    if counts is None:
        counts = self._workers[worker_id] = [0, 0.0, 0.0, 0.0, 0.0]
    counts[0] += 1
    counts[1] += busy_s


PATCHES: list[tuple[Any, str, Any]] = [
    (worker_loop.CpuMeter, "spent", _no_cpu_reads),
    (fetch.CollateTimer, "__call__", _untimed_collate),
    (StepClock, "worker_did", _old_worker_did),
]
ORIGINALS = [(owner, name, getattr(owner, name)) for owner, name, _ in PATCHES]


def _counters(on: bool) -> None:
    for owner, name, value in ORIGINALS if on else PATCHES:
        setattr(owner, name, value)


def _per_batch_us(loader: DataLoader[Any]) -> float:
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    count = 0
    for _ in it:
        count += 1
    return (time.perf_counter() - start) / count * 1e6


def _isolated_us(on: bool, calls: int = 200_000) -> float:
    """The added code alone, per batch (no processes: the figure noise cannot hide)."""
    _counters(on)
    collate = fetch.CollateTimer(list)
    meter = worker_loop.CpuMeter()
    clock = StepClock()
    samples = [1]
    start = time.perf_counter()
    for _ in range(calls):
        collate(samples)
        meter.spent(time.perf_counter())
        clock.worker_did(0, 0.001, 0.001, 0.0)
    elapsed = time.perf_counter() - start
    _counters(True)
    return elapsed / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    added = statistics.median(_isolated_us(True) - _isolated_us(False) for _ in range(args.reps))
    print(f"added code alone: {added:.2f} us per batch (median of {args.reps})")
    scenarios = {
        "S2 ints bs1 nw2": lambda: DataLoader(list(range(20000)), batch_size=1, num_workers=2),
        "S2 ints bs32 nw2": lambda: DataLoader(list(range(64000)), batch_size=32, num_workers=2),
        "S1 images bs64 nw2": lambda: DataLoader(Images(64 * 60), batch_size=64, num_workers=2),
    }
    for name, make in scenarios.items():
        on: list[float] = []
        off: list[float] = []
        for rep in range(args.reps):
            for counters in [True, False] if rep % 2 == 0 else [False, True]:
                _counters(counters)
                (on if counters else off).append(_per_batch_us(make()))
        _counters(True)
        overhead = statistics.median(a / b - 1 for a, b in zip(on, off, strict=True))
        print(
            f"{name:22} on {statistics.median(on):9.2f} us/batch  off "
            f"{statistics.median(off):9.2f}  overhead {overhead:+.1%} (median of paired ratios)"
        )


if __name__ == "__main__":
    main()
