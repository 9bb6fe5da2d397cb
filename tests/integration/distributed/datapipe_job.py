"""Run under torchrun: a shuffled, sharded DataPipe graph loaded with 2 workers per rank.

argv: OUT N FULLSYNC. Rank 0 writes [{rank, seen: {epoch: [ids]}, batches: {epoch: n}}].
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from conveyor import DataLoader
from conveyor.datapipes.iter import IterableWrapper


def main() -> None:
    out_path, n, fullsync = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dp = IterableWrapper(range(n)).shuffle(buffer_size=1000).sharding_filter()
    loader = DataLoader(
        dp,
        batch_size=4,
        shuffle=True,
        num_workers=2,
        fullsync=fullsync,
        # a different generator per rank: the shared seed must still agree
        generator=torch.Generator().manual_seed(100 + rank),
    )
    seen: dict[int, list[int]] = {}
    batches: dict[int, int] = {}
    for epoch in range(3):
        got = list(loader)
        batches[epoch] = len(got)
        seen[epoch] = [int(i) for b in got for i in b]
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"rank": rank, "seen": seen, "batches": batches})
    if rank == 0:
        with open(out_path, "w") as fh:
            json.dump(gathered, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
