"""Tar parsing and the shard cache's entry check: what the safety checks cost.

1. conveyor's strict, bounded tar reader (`conveyor.formats.read_members`) against Python's
   `tarfile` (WebDataset's reader) on the same in-memory shards, interleaved, medians.
   With ``--reference FILE`` (a copy of an older ``conveyor/formats/tar.py``, e.g. from
   ``git show REV:src/conveyor/formats/tar.py``) that reader is timed beside them too.
2. A shard cache hit: the size + CRC-32 check before serving, against reading the entry alone.

    python benchmarks/tar_parse.py [--rounds 15] [--reference /tmp/old_tar.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import statistics
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from conveyor.formats import ShardWriter, read_members
from conveyor.storage.cache_entries import open_verified, write_record

SHAPES = {"small members (200 B)": (10_000, 200), "JPEG-sized members (60 kB)": (2_000, 60_000)}


def make_shard(directory: str, count: int, size: int) -> bytes:
    rng = np.random.default_rng(0)
    with ShardWriter(os.path.join(directory, f"s{size}-%d.tar"), max_count=count) as writer:
        for i in range(count):
            writer.write({"__key__": f"{i:07d}", "bin": rng.bytes(size), "cls": i})
    with open(writer.shards[0], "rb") as shard:
        return shard.read()


def with_tarfile(data: bytes, _: str) -> Iterator[Any]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for info in archive:
            if info.isreg():
                extracted = archive.extractfile(info)
                assert extracted is not None
                yield info.name, extracted.read()


def with_conveyor(data: bytes, url: str) -> Iterator[Any]:
    return read_members(io.BytesIO(data), url)


def load_reference(path: str) -> Callable[[bytes, str], Iterator[Any]]:
    spec = importlib.util.spec_from_file_location("reference_tar", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["reference_tar"] = module
    spec.loader.exec_module(module)
    return lambda data, url: module.read_members(io.BytesIO(data), url)


def time_readers(readers: dict[str, Any], data: bytes, rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(rounds):
        for name, reader in readers.items():
            started = time.perf_counter()
            for _member in reader(data, "bench.tar"):
                pass
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def cache_check(directory: str, rounds: int) -> tuple[float, float]:
    path = os.path.join(directory, "entry.tar")
    data = os.urandom(256 << 20)
    with open(path, "wb") as out:
        out.write(data)
    write_record(path, path + ".tmp", "s3://bucket/entry.tar", len(data), zlib.crc32(data))
    del data
    plain, checked = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        with open(path, "rb") as entry:
            while entry.read(1 << 20):
                pass
        plain.append(time.perf_counter() - started)
        started = time.perf_counter()
        verified = open_verified(path)
        assert verified is not None
        with verified:
            while verified.read(1 << 20):
                pass
        checked.append(time.perf_counter() - started)
    return statistics.median(plain), statistics.median(checked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--reference", help="an older conveyor/formats/tar.py to time beside")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs")
    readers: dict[str, Any] = {"tarfile": with_tarfile, "conveyor": with_conveyor}
    if args.reference:
        readers["reference"] = load_reference(args.reference)
    with tempfile.TemporaryDirectory() as directory:
        os.chmod(directory, 0o700)
        for label, (count, size) in SHAPES.items():
            data = make_shard(directory, count, size)
            medians = time_readers(readers, data, args.rounds)
            members = 2 * count
            cells = [f"{name} {seconds * 1e3:.1f} ms" for name, seconds in medians.items()]
            ratios = [f"conveyor/{name} {medians['conveyor'] / medians[name]:.2f}x"
                      for name in medians if name != "conveyor"]  # fmt: skip
            print(f"{label}, {members} members: {', '.join(cells)}; {', '.join(ratios)}")
        plain, checked = cache_check(directory, min(args.rounds, 7))
        rate = 256 / (checked - plain) if checked > plain else float("inf")
        print(f"cache hit, 256 MiB entry (page cache warm): read {plain * 1e3:.0f} ms, "
              f"check + read {checked * 1e3:.0f} ms (the check: {rate:.0f} MiB/s)")  # fmt: skip
    print(f"load: {os.getloadavg()[0]:.1f} (1 min)")


if __name__ == "__main__":
    main()
