"""Run under torchrun: a shuffled, sharded DataPipe graph loaded with 2 workers per rank.

argv: OUT N FULLSYNC. Rank 0 writes [{rank, seen: {epoch: [ids]}, batches: {epoch: n}}].
"""

from __future__ import annotations

import sys

import torch
from process_group import process_group, write_gathered

from conveyor import DataLoader
from conveyor.datapipes.iter import IterableWrapper


def main() -> None:
    out_path, n, fullsync = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    with process_group() as rank:
        write_gathered(out_path, {"rank": rank, **load(n, fullsync, rank)})


def load(n: int, fullsync: bool, rank: int) -> dict[str, object]:
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
    return {"seen": seen, "batches": batches}


if __name__ == "__main__":
    main()
