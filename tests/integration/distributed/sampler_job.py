"""Run under torchrun: every rank loads its DistributedSampler shard with 2 workers.

Writes, from rank 0, a JSON file mapping epoch -> rank -> list of sample ids.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import torch.distributed as dist
from process_group import process_group, write_gathered

import conveyor


class Ids:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def main() -> None:
    out_path, n, drop_last = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    with process_group() as rank:
        write_gathered(out_path, {"rank": rank, **load_shards(n, drop_last)})


def load_shards(n: int, drop_last: bool) -> dict[str, Any]:
    # rank and world size come from torch.distributed: none are passed
    sampler = conveyor.DistributedSampler(Ids(n), shuffle=True, seed=7, drop_last=drop_last)
    loader = conveyor.DataLoader(Ids(n), batch_size=4, sampler=sampler, num_workers=2)
    seen: dict[int, list[int]] = {}
    with warnings.catch_warnings(record=True) as sharded_warnings:
        warnings.simplefilter("always")
        for epoch in range(3):
            sampler.set_epoch(epoch)
            seen[epoch] = [int(i) for batch in loader for i in batch]
    # a loader that does not shard: every rank would load every sample; conveyor says so
    plain = conveyor.DataLoader(Ids(n), batch_size=4, shuffle=True, num_workers=0)
    with warnings.catch_warnings(record=True) as plain_warnings:
        warnings.simplefilter("always")
        for _ in range(2):
            list(plain)
    return {
        "world": dist.get_world_size(),
        "seen": seen,
        "batches": len(loader),
        "sharded_warnings": [str(w.message) for w in sharded_warnings],
        "plain_warnings": [str(w.message) for w in plain_warnings],
    }


if __name__ == "__main__":
    main()
