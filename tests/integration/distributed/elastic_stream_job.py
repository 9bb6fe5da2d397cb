"""Run under torchrun: a ShardedStream through a DataLoader on every rank.

argv: OUT NUM_WORKERS TAKE [STATE]. Each rank loads STATE (a pickled checkpoint merged
from another job's ranks) if given, takes TAKE batches (-1: to the end of the epoch) and
records the samples and its checkpoint. Rank 0 writes the gathered records (pickle).
"""

from __future__ import annotations

import itertools
import pickle
import sys
from collections.abc import Iterator

import torch.distributed as dist

from conveyor import DataLoader, ShardedStream

SIZES = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4)
SHARDS = [[f"{s}-{i}" for i in range(size)] for s, size in enumerate(SIZES)]


def read(shard: list[str], offset: int) -> Iterator[str]:
    return iter(shard[offset:])


def main() -> None:
    out_path, num_workers, take = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")
    loader = DataLoader(
        ShardedStream(SHARDS, read, shuffle=True, seed=5), batch_size=2, num_workers=num_workers
    )
    if len(sys.argv) > 4:
        with open(sys.argv[4], "rb") as fh:
            loader.load_state_dict(pickle.load(fh))
    it = iter(loader)
    batches = itertools.islice(it, None if take < 0 else take)
    samples = [x for batch in batches for x in batch]
    state = loader.state_dict()
    del it
    record = {"rank": dist.get_rank(), "samples": samples, "state": state}
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, record)
    if dist.get_rank() == 0:
        with open(out_path, "wb") as fh:
            pickle.dump(gathered, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
