"""Run under torchrun: a shuffled TarShards through a DataLoader on every rank.

argv: OUT SHARD_DIR NUM_WORKERS TAKE [STATE]. Each rank loads STATE (a pickled checkpoint
merged from another job's ranks) if given, takes TAKE batches (-1: to the end of the
epoch) and records the sample keys and its checkpoint. Rank 0 writes the gathered records.
"""

from __future__ import annotations

import glob
import itertools
import os
import pickle
import sys
from typing import Any

import torch
import torch.distributed as dist

from conveyor import DataLoader
from conveyor.datapipes.iter.loading import TarShards


def keys(samples: list[dict[str, Any]]) -> list[str]:
    return [s["__key__"] for s in samples]


def main() -> None:
    out_path, shard_dir = sys.argv[1], sys.argv[2]
    num_workers, take = int(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("gloo")
    shards = sorted(glob.glob(os.path.join(shard_dir, "*.tar")))
    pipe = TarShards(shards, decode=None, shuffle=True, shuffle_buffer=4, seed=9)
    loader = DataLoader(
        pipe,
        batch_size=2,
        num_workers=num_workers,
        collate_fn=keys,
        generator=torch.Generator().manual_seed(dist.get_rank()),
    )
    if len(sys.argv) > 5:
        with open(sys.argv[5], "rb") as fh:
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
