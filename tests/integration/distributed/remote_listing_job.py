"""Run under torchrun: tar shards of a glob on S3, 2 workers per rank, one epoch.

argv: OUT ENDPOINT PATTERN WORKER_TYPE. Each rank reads its share through a DataLoader; rank
0 writes [{rank, keys, listings}] (``listings``: the listing calls stats() counted).
"""

from __future__ import annotations

import sys

from process_group import process_group, write_gathered

from conveyor import DataLoader
from conveyor.datapipes.iter import TarShards


def main() -> None:
    out_path, endpoint, pattern, worker_type = sys.argv[1:5]
    with process_group() as rank:
        options = {
            "key": "conveyor",
            "secret": "conveyor",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
        pipe = TarShards(pattern, decode=None, storage_options=options)
        loader = DataLoader(pipe, batch_size=None, num_workers=2, worker_type=worker_type)
        keys = [sample["__key__"] for sample in loader]
        listings = loader.stats().requests.listings
        write_gathered(out_path, {"rank": rank, "keys": keys, "listings": listings})


if __name__ == "__main__":
    main()
