"""loader.doctor() on the seeded scenarios at a larger size: top-1 diagnosis, predicted vs
measured gain of its fix, and how long the doctor took. Medians over ``--reps`` runs.

The scenarios are tests/integration/test_doctor.py's (a cost that spins is Python CPU, a
sleep is latency, the step blocks as a GPU step does), with 64 batches per measured run.

    python benchmarks/doctor_scenarios.py --reps 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conveyor import DataLoader
from conveyor.engine.loop import base_iterator
from conveyor.transport.options import ENV_SHM_MAX_BYTES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sample_datasets import Frames, Photos, spin  # tests/: shared with test_doctor


class Items:
    def __init__(self, n: int, spin_s: float = 0.0, sleep_s: float = 0.0) -> None:
        self.n, self.spin_s, self.sleep_s = n, spin_s, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        if self.spin_s:
            spin(self.spin_s)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return i


class SlowClass(Items):
    def __getitem__(self, i: int) -> Any:
        time.sleep(0.08 if i % 16 == 0 else 0.002)
        return i


class ManyObjects(Items):
    def __getitem__(self, i: int) -> Any:
        return [[i, j] for j in range(1000)]


class SlowToUnpickle:
    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return _rebuilt_slowly, (self.value,)


def _rebuilt_slowly(value: int) -> int:
    spin(0.006)
    return value


class CheapToMake(Items):
    def __getitem__(self, i: int) -> Any:
        return SlowToUnpickle(i)


def _slow_collate(batch: list[int]) -> list[int]:
    spin(0.012)
    return batch


class Planes(Items):
    """512 kB per sample (one uint8 plane)."""

    def __getitem__(self, i: int) -> Any:
        return np.full((512, 1024), i % 251, dtype=np.uint8)


class Images(Items):
    """A 4 MB uint8 image tensor per sample."""

    def __getitem__(self, i: int) -> Any:
        return torch.full((4, 1024, 1024), i % 251, dtype=torch.uint8)


@contextlib.contextmanager
def pinning_possible() -> Iterator[None]:
    """pin_memory=True runs its pin stage here: with an accelerator it does anyway; on a
    CPU-only machine conveyor (as torch) would warn and skip pinning, so the check that
    an accelerator exists is lifted for the scenario (the pin thread and the pin function
    are conveyor's own)."""
    if torch.accelerator.is_available():
        yield
        return
    original = base_iterator.pin_memory_available
    base_iterator.pin_memory_available = lambda device="": True
    try:
        yield
    finally:
        base_iterator.pin_memory_available = original


@contextlib.contextmanager
def scarce_shared_memory(max_bytes: int = 1 << 20) -> Iterator[None]:
    """A container's small /dev/shm: conveyor's slabs capped (``CONVEYOR_SHM_MAX_BYTES``)
    below one batch, so batches are pickled through the worker pipes."""
    before = os.environ.get(ENV_SHM_MAX_BYTES)
    os.environ[ENV_SHM_MAX_BYTES] = str(max_bytes)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_SHM_MAX_BYTES, None)
        else:
            os.environ[ENV_SHM_MAX_BYTES] = before


def _sleep(seconds: float) -> Callable[[Any], None]:
    def step(batch: Any) -> None:
        time.sleep(seconds)

    return step


def _keeping(seconds: float) -> Callable[[Any], None]:
    kept: list[Any] = []

    def step(batch: Any) -> None:
        kept.append(batch)
        time.sleep(seconds)

    return step


Scenario = tuple[str, Callable[[], DataLoader[Any]], Callable[[Any], None], Callable[[], Any]]


SCENARIOS: dict[str, Scenario] = {
    "not the bottleneck": (
        "training step",
        lambda: DataLoader(Items(4000), batch_size=4, num_workers=1, worker_type="thread"),
        _sleep(0.01),
        contextlib.nullcontext,
    ),
    "I/O latency": (
        "I/O latency",
        lambda: DataLoader(
            Items(4000, sleep_s=0.01), batch_size=2, num_workers=1, worker_type="thread"
        ),
        _sleep(0.004),
        contextlib.nullcontext,
    ),
    "GIL-bound transform": (
        "GIL (thread workers)",
        lambda: DataLoader(
            Items(4000, spin_s=0.003), batch_size=2, num_workers=2, worker_type="thread"
        ),
        _sleep(0.002),
        contextlib.nullcontext,
    ),
    "decode-bound": (
        "worker CPU (decode, transforms)",
        lambda: DataLoader(Items(4000, spin_s=0.004), batch_size=2, num_workers=1),
        _sleep(0.004),
        contextlib.nullcontext,
    ),
    "decode-bound, whole JPEGs cropped": (
        "worker CPU (decode, transforms)",
        lambda: DataLoader(Photos(4000), batch_size=2, num_workers=1),
        _sleep(0.01),
        contextlib.nullcontext,
    ),
    "collate-bound": (
        "collate_fn",
        lambda: DataLoader(Items(4000), batch_size=2, num_workers=1, collate_fn=_slow_collate),
        _sleep(0.006),
        contextlib.nullcontext,
    ),
    "slow sample class": (
        "slow samples",
        lambda: DataLoader(SlowClass(4000), batch_size=2, num_workers=4, worker_type="thread"),
        _sleep(0.004),
        contextlib.nullcontext,
    ),
    "main-process transport": (
        "main process (transport)",
        lambda: DataLoader(
            CheapToMake(4000), batch_size=None, num_workers=2, collate_fn=lambda x: x
        ),
        _sleep(0.003),
        contextlib.nullcontext,
    ),
    "GC spikes": (
        "GC pauses",
        lambda: DataLoader(
            ManyObjects(4000), batch_size=4, num_workers=2, worker_type="thread", collate_fn=list
        ),
        _keeping(0.004),
        contextlib.nullcontext,
    ),
    "pin thread": (
        "pin thread",
        lambda: DataLoader(
            Planes(4000), batch_size=8, num_workers=2, pin_memory=True, collate_fn=Frames
        ),
        _sleep(0.006),
        pinning_possible,
    ),
    "shared-memory-bound": (
        "shared memory",
        lambda: DataLoader(Images(4000), batch_size=4, num_workers=2),
        _sleep(0.004),
        scarce_shared_memory,
    ),
}

RANK_LATENCY_S = (0.0, 0.012)  # per sample, by rank: rank 1 reads slowly


def rank_job(out_path: str, batches: int) -> None:
    """Under torchrun: this rank's doctor on its loader, the step all-reducing."""
    import torch.distributed as dist

    from conveyor import DistributedSampler

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = Items(4000, sleep_s=RANK_LATENCY_S[rank % 2])

    def step(batch: Any) -> None:
        time.sleep(0.004)
        dist.all_reduce(torch.ones(1))  # every rank meets here, as in DDP's backward

    loader = DataLoader(
        data, batch_size=2, num_workers=1, worker_type="thread", sampler=DistributedSampler(data)
    )
    report = loader.doctor(step, batches=batches)
    if rank == 0:
        with open(out_path, "w") as fh:
            fh.write(report.to_json())
    dist.barrier()
    dist.destroy_process_group()


def _rank_imbalance(batches: int) -> Any:
    """The rank-imbalance scenario through real torchrun (2 ranks); None if unavailable."""
    import socket
    import subprocess
    import tempfile

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        return None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.json")
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--master_addr=127.0.0.1",
            f"--master_port={port}",
            __file__,
            "--rank-job",
            out,
            "--batches",
            str(batches),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            print(f"rank imbalance: torchrun failed ({done.returncode}): {done.stderr[-400:]}")
            return None
        with open(out) as fh:
            return json.load(fh)


def _within(predicted: float, measured: float | None) -> str:
    """Predicted throughput within ±15 % of the measured throughput (with the fix)."""
    if measured is None:
        return "n/a"
    ratio = (1 + predicted) / (1 + measured)
    return f"{ratio:.2f} {'yes' if abs(ratio - 1) <= 0.15 else 'NO'}"


def _row(
    name: str,
    right: int,
    reps: int,
    fixes: set[str],
    predicted: list[float],
    measured: list[float | None],
    took: list[float],
) -> str:
    pred = statistics.median(predicted)
    seen = [m for m in measured if m is not None]
    meas = statistics.median(seen) if seen else None
    shown = "none" if meas is None else f"{meas:+.0%}"
    return (
        f"| {name} | {right}/{reps} | {'; '.join(sorted(fixes))} | {pred:+.0%} | {shown} | "
        f"{_within(pred, meas) if seen or pred else 'n/a'} | {max(took):.1f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="1 run of 48 batches each")
    parser.add_argument("--only", default="", help="run scenarios whose name has this")
    parser.add_argument("--rank-job", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_job:
        rank_job(args.rank_job, args.batches)
        return
    if args.quick:
        args.reps, args.batches = 1, 48
    heap = [[i] for i in range(300_000)]  # for the GC scenario: a heap every scan walks
    print(f"{os.cpu_count()} CPUs; load average before: {os.getloadavg()}")
    print(
        "| scenario | right (of reps) | fix | predicted gain | measured gain | "
        "predicted/measured throughput, within ±15 % | doctor took (max) |"
    )
    print("|---|---|---|---|---|---|---|")
    right_total, ran = 0, 0
    for name, (expected, make, step, setting) in SCENARIOS.items():
        if args.only not in name:
            continue
        ran += 1
        right, predicted, measured, took, fixes = 0, [], [], [], set()
        for _ in range(args.reps):
            with setting(), warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the scarce-memory warning
                report = make().doctor(step, batches=args.batches)
            right += report.bottleneck == expected
            fixes.add(report.diagnosis.fix.description.split(" (")[0].split(";")[0])
            predicted.append(report.diagnosis.predicted_gain)
            measured.append(report.measured_gain)
            took.append(report.duration_s)
        right_total += right == args.reps
        print(_row(name, right, args.reps, fixes, predicted, measured, took))
    if args.only in "rank imbalance under torchrun":
        right, predicted, measured, took, fixes = 0, [], [], [], set()
        for _ in range(args.reps):
            data = _rank_imbalance(args.batches)
            if data is None:
                break
            right += data["bottleneck"] == "rank imbalance"
            fixes.add(data["fix"].split(" (")[0])
            predicted.append(data["predicted_gain"])
            measured.append(data["measured_gain"])
            took.append(data["duration_s"])
        if took:
            ran += 1
            right_total += right == args.reps
            print(
                _row(
                    "rank imbalance (torchrun, rank 0)",
                    right,
                    args.reps,
                    fixes,
                    predicted,
                    measured,
                    took,
                )
            )
        else:
            print("rank imbalance under torchrun: skipped (torch.distributed/gloo unavailable)")
    print(f"scenarios right every time: {right_total} of {ran}")
    print(f"load average after: {os.getloadavg()}")
    del heap


if __name__ == "__main__":
    main()
