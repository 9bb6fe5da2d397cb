"""Run under torchrun: GlobalShuffleSampler with rank and world taken from torch.distributed.

argv: OUT N TAKE [STATE]. Each rank takes TAKE indices of epoch 1 straight from the sampler
(after loading STATE, a checkpoint from another run, if given) and records its state; then
loads a whole epoch through a DataLoader with 2 workers. Rank 0 writes the gathered records.
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any

from process_group import process_group, write_gathered

from conveyor import DataLoader, GlobalShuffleSampler


def main() -> None:
    out_path, n, take = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    state_path = sys.argv[4] if len(sys.argv) > 4 else None
    with process_group() as rank:
        write_gathered(out_path, {"rank": rank, **take_and_load(n, take, state_path)})


def take_and_load(n: int, take: int, state_path: str | None) -> dict[str, Any]:
    sampler = GlobalShuffleSampler(n, seed=7)  # num_replicas and rank from the group
    sampler.set_epoch(1)
    if state_path is not None:
        with open(state_path) as fh:
            sampler.load_state_dict(json.load(fh))
        sampler.set_epoch(1)
    taken = list(itertools.islice(iter(sampler), take))
    state = sampler.state_dict()

    loader_sampler = GlobalShuffleSampler(n, seed=7)
    loader_sampler.set_epoch(1)
    loader = DataLoader(list(range(n)), batch_size=4, sampler=loader_sampler, num_workers=2)
    loaded = [int(i) for batch in loader for i in batch]
    return {
        "world": loader_sampler.num_replicas,
        "taken": taken,
        "state": state,
        "loaded": loaded,
    }


if __name__ == "__main__":
    main()
