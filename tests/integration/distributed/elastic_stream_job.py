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
from typing import Any

from process_group import process_group, write_gathered

from conveyor import DataLoader, ShardedStream

SIZES = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4)
SHARDS = [[f"{s}-{i}" for i in range(size)] for s, size in enumerate(SIZES)]


def read(shard: list[str], offset: int) -> Iterator[str]:
    return iter(shard[offset:])


def main() -> None:
    out_path, num_workers, take = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    state_path = sys.argv[4] if len(sys.argv) > 4 else None
    with process_group() as rank:
        record = {"rank": rank, **take_batches(num_workers, take, state_path)}
        write_gathered(out_path, record, pickled=True)


def take_batches(num_workers: int, take: int, state_path: str | None) -> dict[str, Any]:
    loader = DataLoader(
        ShardedStream(SHARDS, read, shuffle=True, seed=5), batch_size=2, num_workers=num_workers
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
