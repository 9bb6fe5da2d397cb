"""Run under torchrun (2 ranks, gloo): rank 1's data waits on I/O, rank 0's does not; the
step all-reduces (as DDP's backward does), so rank 0 waits for rank 1 inside its step.

argv: OUT BATCHES. Each rank runs ``loader.doctor()``; rank 0 writes every rank's report
as JSON: [{rank, bottleneck, evidence, fix_changes, predicted_gain, measured_gain, ...}].
"""

from __future__ import annotations

import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from process_group import process_group, write_gathered

from conveyor import DataLoader, DistributedSampler

LATENCY_S = {0: 0.0, 1: 0.012}  # per sample


class Items:
    def __init__(self, n: int, latency_s: float) -> None:
        self.n, self.latency_s = n, latency_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if self.latency_s:
            time.sleep(self.latency_s)  # a remote read
        return i


def step(batch: Any) -> None:
    time.sleep(0.004)  # the forward and backward (a GPU's: the CPU waits)
    dist.all_reduce(torch.ones(1))  # the gradients' all-reduce: every rank meets here


def main() -> None:
    out_path, batches = sys.argv[1], int(sys.argv[2])
    with process_group() as rank:
        write_gathered(out_path, {"rank": rank, **diagnose(rank, batches)})


def diagnose(rank: int, batches: int) -> dict[str, Any]:
    data = Items(4000, LATENCY_S[rank])
    loader = DataLoader(
        data, batch_size=2, num_workers=1, worker_type="thread", sampler=DistributedSampler(data)
    )
    report = loader.doctor(step, batches=batches).as_dict()
    keys = ("bottleneck", "evidence", "fix_changes", "predicted_gain", "measured_gain")
    return {key: report[key] for key in (*keys, "step_floor_ms", "period_ms", "duration_s")}


if __name__ == "__main__":
    main()
