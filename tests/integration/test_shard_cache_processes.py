"""ShardCache shared by several processes filling and evicting it at the same time."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
from pathlib import Path

import fsspec
import pytest

from conveyor.storage import ShardCache, open_url

ROOT = "memory://conveyor-cache-processes"
SIZES = [150_000 + 10_000 * i for i in range(8)]


def blob(index: int) -> bytes:
    return hashlib.sha256(str(index).encode()).digest() * (SIZES[index] // 32)


def reader(directory: str, seed: int) -> None:
    """Read every shard several times in a random order; check each byte read."""
    cache = ShardCache(directory, max_bytes=600_000)  # room for about 3 of the 8 shards
    order = list(range(len(SIZES))) * 3
    random.Random(seed).shuffle(order)
    for index in order:
        with open_url(f"{ROOT}/{index}.tar", cache=cache) as stream:
            if stream.read() != blob(index):
                os._exit(3)


@pytest.mark.timeout(60)
def test_concurrent_fill_and_evict(tmp_path: Path) -> None:
    fs = fsspec.filesystem("memory")
    for index in range(len(SIZES)):
        fs.pipe(f"{ROOT}/{index}.tar", blob(index))  # forked readers inherit the store
    directory = str(tmp_path / "cache")
    try:
        context = multiprocessing.get_context("fork")
        workers = [context.Process(target=reader, args=(directory, s)) for s in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=50)
        assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
    finally:
        fs.rm(ROOT, recursive=True)
    cache = ShardCache(directory, max_bytes=600_000)
    names = os.listdir(directory)
    assert not [name for name in names if name.startswith(".tmp-")]
    assert 0 < cache.usage_bytes() <= 600_000
    for index in range(len(SIZES)):  # whatever survived is complete
        path = cache.entry_path(f"{ROOT}/{index}.tar")
        if os.path.exists(path):
            assert Path(path).read_bytes() == blob(index)
