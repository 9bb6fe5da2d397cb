"""Autotune against a grid of fixed settings, under a simulated trainer.

The trainer is the main thread alternating ``next(loader)`` with a step of fixed duration
that blocks (a GPU step: no CPU). Three datasets: decode-bound (Python CPU per sample,
process workers), I/O-latency-bound (a sleep per sample, thread workers) and IPC-bound
(1 MB tensors per sample through process workers' shared memory). For each, every fixed
setting of the grid and autotune run one epoch, interleaved over ``--reps`` rounds;
medians. Reported: CPU seconds per sample (this process and its reaped workers), exposed
data wait (time in ``next()`` over the steps' time), and for autotune when it settled.

Then the step-time change: an autotuned epoch whose step doubles (or halves) half way;
reported: the seconds from the change to autotune's last decision, and how far the
active workers moved after that (oscillation).

    python benchmarks/autotune.py --reps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from conveyor import AutotuneOptions, DataLoader


def _spin(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


class Decode:
    """1.5 ms of Python CPU per sample (a decode that holds the GIL)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        _spin(0.0015)
        return i


class Latency(Decode):
    """5 ms of latency per sample (an object store's first byte)."""

    def __getitem__(self, i: int) -> int:
        time.sleep(0.005)
        return i


class Large(Decode):
    """1 MB per sample: the cost is carrying it to the main process."""

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((1 << 20,), i % 256, dtype=torch.uint8)


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[int], Any]
    samples: int
    batch_size: int
    worker_type: str
    grid: tuple[int, ...]  # fixed num_workers tried; autotune's ceiling is the largest
    step_s: float


CASES = [
    Case("decode-bound", Decode, 1600, 4, "process", (1, 2), 0.008),
    Case("I/O latency", Latency, 2400, 4, "thread", (1, 2, 4, 6, 8), 0.005),
    Case("IPC-bound", Large, 1600, 4, "process", (1, 2), 0.004),
]


@dataclass
class Result:
    cpu_per_sample_ms: float
    exposed_wait: float  # time in next() over step time, the whole epoch
    steady_wait: float  # the same after settling (autotune's last change; fixed: batch 16)
    settled_s: float  # autotune: seconds from the first batch to its last decision
    final_workers: int


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _epoch(loader: DataLoader[Any], step: Callable[[int], float]) -> Result:
    cpu = _cpu_s()
    stamps: list[float] = []
    waits: list[float] = []
    steps: list[float] = []
    samples = 0
    iterator = iter(loader)
    while True:
        asked = time.perf_counter()
        batch = next(iterator, None)
        if batch is None:
            break
        stamps.append(time.perf_counter())
        waits.append(stamps[-1] - asked)
        samples += len(batch)
        time.sleep(step(len(stamps) - 1))  # the training step (blocks, as on a GPU)
        steps.append(time.perf_counter() - stamps[-1])
    del batch, iterator
    cpu = _cpu_s() - cpu  # the epoch ended: its process workers were reaped
    decisions = loader.stats().decisions
    last = decisions[-1].batch if decisions else 0
    settled = stamps[last] - stamps[0] if decisions else 0.0
    final = decisions[-1].active_workers if decisions else loader.num_workers
    after = max(16, last + 1)
    return Result(
        1e3 * cpu / samples,
        sum(waits[1:]) / sum(steps),
        sum(waits[after:]) / sum(steps[after:]),
        settled,
        final,
    )


def _loader(case: Case, workers: int, autotune: bool) -> DataLoader[Any]:
    return DataLoader(
        case.make(case.samples),
        batch_size=case.batch_size,
        num_workers=workers,
        worker_type=case.worker_type,
        autotune=AutotuneOptions(initial_workers=1) if autotune else False,
    )


def grid(case: Case, reps: int) -> None:
    runs: dict[str, list[Result]] = {}
    ceiling = max(case.grid)
    for _ in range(reps):
        for workers in case.grid:
            runs.setdefault(f"fixed {workers}", []).append(
                _epoch(_loader(case, workers, False), lambda _: case.step_s)
            )
        runs.setdefault("autotune", []).append(
            _epoch(_loader(case, ceiling, True), lambda _: case.step_s)
        )
    print(f"\n{case.name}: {case.worker_type} workers, step {case.step_s * 1e3:.0f} ms")
    print("| setting | CPU ms/sample | exposed wait | after settling | settled after | workers |")
    print("|---|---|---|---|---|---|")
    fed = [m(r, "cpu_per_sample_ms") for r in runs.values() if m(r, "steady_wait") <= 0.02]
    for name, results in runs.items():
        settled = f"{m(results, 'settled_s'):.1f} s" if name == "autotune" else ""
        workers = m(results, "final_workers") if name == "autotune" else name.split()[1]
        print(
            f"| {name} | {m(results, 'cpu_per_sample_ms'):.2f} | "
            f"{m(results, 'exposed_wait'):.1%} | {m(results, 'steady_wait'):.1%} | {settled} | "
            f"{workers} |"
        )
    if fed:
        best = min(fed)
        tuned = m(runs["autotune"], "cpu_per_sample_ms")
        print(
            f"autotune CPU/sample over the best fixed setting with <= 2 % wait: {tuned / best:.2f}x"
        )


def m(results: list[Result], name: str) -> float:
    return statistics.median(getattr(r, name) for r in results)


def step_change(reps: int) -> None:
    case = CASES[1]
    half = case.samples // case.batch_size // 2
    print("\nstep change (I/O latency, thread workers, ceiling 8)")
    print("| step | re-settled after | workers, last half after the change (max - min) |")
    print("|---|---|---|")
    for before, after in ((0.005, 0.010), (0.010, 0.005)):
        settle, spread = [], []
        for _ in range(reps):
            loader = _loader(case, max(case.grid), True)
            stamps: list[float] = []
            for index, _batch in enumerate(loader):
                stamps.append(time.perf_counter())
                time.sleep(before if index < half else after)
            decisions = loader.stats().decisions
            later = [d for d in decisions if d.batch >= half]
            settle.append(stamps[later[-1].batch] - stamps[half] if later else 0.0)
            end = len(stamps)
            tail = [_active_at(decisions, b) for b in range((half + end) // 2, end)]
            spread.append(max(tail) - min(tail))
        label = f"{before * 1e3:.0f} -> {after * 1e3:.0f} ms"
        print(f"| {label} | {statistics.median(settle):.1f} s | {max(spread)} |")


def _active_at(decisions: Any, batch: int) -> int:
    """Workers taking tasks when ``batch`` was delivered."""
    active = 1  # initial_workers
    for decision in decisions:
        if decision.batch > batch:
            break
        active = decision.active_workers
    return active


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()}")
    for case in CASES:
        grid(case, args.reps)
    step_change(args.reps)
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
