"""One rank of s7_scale.py's ``ranks`` scenario, run by torchrun.

argv: OUT ENDPOINT PIPELINE SHARDS_JSON WORKERS. Reads the S7 shards through the proxy at
ENDPOINT with WORKERS process workers (``conveyor``: TarShards, split across ranks and
workers by the loader; ``wds``: WebDataset with split_by_node / split_by_worker), and rank 0
writes every rank's keys, bytes, first batch, batch waits and seconds to OUT.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch.distributed as dist
import torch.utils.data as torch_data

from conveyor.dataloader import DataLoader
from conveyor.datapipes.iter import TarShards

BUCKET = "s7-bench"


def key_bytes(sample: dict[str, Any]) -> tuple[str, bytes]:
    return str(sample["__key__"]), bytes(sample["jpg"])


def loader_for(pipeline: str, endpoint: str, shards: list[str], workers: int) -> Any:
    if pipeline == "wds":
        import webdataset as wds

        urls = [f"{endpoint}/{BUCKET}/{key}" for key in shards]
        dataset = (
            wds.WebDataset(
                urls, shardshuffle=False, empty_check=False, nodesplitter=wds.split_by_node
            )
            .map(key_bytes)
            .batched(64, partial=True)
        )
        return torch_data.DataLoader(dataset, batch_size=None, num_workers=workers)
    options = {
        "key": "conveyor",
        "secret": "conveyor",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    urls = [f"s3://{BUCKET}/{key}" for key in shards]
    pipe = TarShards(urls, decode=None, storage_options=options).map(key_bytes)
    return DataLoader(pipe, batch_size=64, num_workers=workers)


def main() -> None:
    out, endpoint, pipeline, shards, workers = sys.argv[1:6]
    dist.init_process_group("gloo")
    loader = loader_for(pipeline, endpoint, json.loads(shards), int(workers))
    keys: list[str] = []
    nbytes = 0
    waits: list[float] = []
    start = asked = time.perf_counter()
    iterator = iter(loader)
    iter_s = time.perf_counter() - start  # the loader's own start (collectives, workers)
    first = 0.0
    warm_at, warm_bytes = time.time(), 0  # steady state: after the 4th batch (wall clock)
    for index, (batch_keys, jpgs) in enumerate(iterator, start=1):
        got = time.perf_counter()
        if index == 1:
            first = got - start
        elif index > 4:
            waits.append(got - asked)
        keys += [str(k) for k in batch_keys]
        nbytes += sum(len(j) for j in jpgs)
        if index == 4:
            warm_at, warm_bytes = time.time(), nbytes
        asked = time.perf_counter()
    record = {"rank": dist.get_rank(), "keys": keys, "nbytes": nbytes, "waits": waits,
              "first_batch_s": first, "iter_s": iter_s, "seconds": time.perf_counter() - start,
              "warm_at": warm_at, "steady_bytes": nbytes - warm_bytes,
              "end_at": time.time()}  # fmt: skip
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, record)
    if dist.get_rank() == 0:
        with open(out, "w") as handle:
            json.dump(gathered, handle)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
