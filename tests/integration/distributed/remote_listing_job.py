"""Run under torchrun: tar shards of a glob on S3, 2 workers per rank, one epoch.

argv: OUT ENDPOINT PATTERN WORKER_TYPE. Each rank reads its share through a DataLoader; rank
0 writes [{rank, keys, listings}] (``listings``: the listing calls stats() counted).
"""

from __future__ import annotations

import json
import sys

import torch.distributed as dist

from conveyor import DataLoader
from conveyor.datapipes.iter import TarShards


def main() -> None:
    out_path, endpoint, pattern, worker_type = sys.argv[1:5]
    dist.init_process_group("gloo")
    options = {
        "key": "conveyor",
        "secret": "conveyor",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    pipe = TarShards(pattern, decode=None, storage_options=options)
    loader = DataLoader(pipe, batch_size=None, num_workers=2, worker_type=worker_type)
    keys = [sample["__key__"] for sample in loader]
    record = {"rank": dist.get_rank(), "keys": keys, "listings": loader.stats().requests.listings}
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, record)
    if dist.get_rank() == 0:
        with open(out_path, "w") as fh:
            json.dump(gathered, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
