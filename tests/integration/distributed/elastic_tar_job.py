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
from process_group import process_group, write_gathered

from conveyor import DataLoader
from conveyor.datapipes.iter.loading import TarShards


def keys(samples: list[dict[str, Any]]) -> list[str]:
    return [s["__key__"] for s in samples]


def main() -> None:
    out_path, shard_dir = sys.argv[1], sys.argv[2]
    num_workers, take = int(sys.argv[3]), int(sys.argv[4])
    state_path = sys.argv[5] if len(sys.argv) > 5 else None
    with process_group() as rank:
        record = {"rank": rank, **take_batches(shard_dir, num_workers, take, state_path, rank)}
        write_gathered(out_path, record, pickled=True)


def take_batches(
    shard_dir: str, num_workers: int, take: int, state_path: str | None, rank: int
) -> dict[str, Any]:
    shards = sorted(glob.glob(os.path.join(shard_dir, "*.tar")))
    pipe = TarShards(shards, decode=None, shuffle=True, shuffle_buffer=4, seed=9)
    loader = DataLoader(
        pipe,
        batch_size=2,
        num_workers=num_workers,
        collate_fn=keys,
        generator=torch.Generator().manual_seed(rank),
    )
    if state_path is not None:
        with open(state_path, "rb") as fh:
            loader.load_state_dict(pickle.load(fh))
    it = iter(loader)
    batches = itertools.islice(it, None if take < 0 else take)
    samples = [x for batch in batches for x in batch]
    state = loader.state_dict()
    del it
    return {"samples": samples, "state": state}


if __name__ == "__main__":
    main()
