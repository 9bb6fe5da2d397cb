"""What exact checkpoints cost: state size, and epoch throughput with state capture on/off.

A shuffled `TarShards` (``shuffle_buffer`` samples buffered) read by 2 workers, 50 kB and
1 kB samples. "on" is conveyor's default (every batch carries its worker's state, so every
step's checkpoint is exact without reading anything again); "off" is
``snapshot_every_n_steps=0`` (no state sent; a resume would read the epoch again);
"on + state_dict()" also calls ``loader.state_dict()`` after every batch, as a job that
checkpoints every step would. torchdata 0.11's StatefulDataLoader reads the same pipe
(process workers only; it has no threads), ``snapshot_every_n_steps=1`` against 0.

Every repetition runs every variant of a configuration in a rotating order, in this one
process; figures are medians, ratios the medians of per-repetition ratios against "off".

    python benchmarks/checkpoint_capture.py --reps 5
"""

from __future__ import annotations

import argparse
import gc
import glob
import io
import json
import os
import pickle
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from conveyor import DataLoader
from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import ShardWriter

Variant = Callable[[list[str]], tuple[float, float]]


def write_shards(root: str, samples: int, sample_bytes: int, per_shard: int) -> list[str]:
    existing = sorted(glob.glob(os.path.join(root, "*.tar")))
    if existing:
        return existing
    os.makedirs(root, exist_ok=True)
    with ShardWriter(os.path.join(root, "part-%04d.tar"), max_count=per_shard) as writer:
        for i in range(samples):
            writer.write({"__key__": f"{i:08d}", "bin": os.urandom(sample_bytes), "cls": i})
    return list(writer.shards)


def pipe(shards: list[str], buffer: int) -> TarShards:
    return TarShards(shards, decode=None, shuffle=True, shuffle_buffer=buffer, seed=1)


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished children (epoch workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def epoch_rate(loader: Any, call_state_dict: bool = False) -> tuple[float, float]:
    """Samples per second, and per CPU second, of one whole epoch (workers' start-up
    included; their CPU time counts once they have exited, at the epoch's end)."""
    start, cpu = time.perf_counter(), _cpu_s()
    samples = 0
    for batch in loader:
        samples += len(batch["cls"])
        if call_state_dict:
            loader.state_dict()
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()
    del batch
    gc.collect()  # the epoch's workers are joined: their CPU time is counted now
    return samples / (time.perf_counter() - start), samples / (_cpu_s() - cpu)


def conveyor_variant(kind: str, every: int | None, buffer: int, calls: bool = False) -> Variant:
    def run(shards: list[str]) -> tuple[float, float]:
        loader = DataLoader(
            pipe(shards, buffer),
            batch_size=32,
            num_workers=2,
            worker_type=kind,
            snapshot_every_n_steps=every,
        )
        return epoch_rate(loader, calls)

    return run


def torchdata_variant(every: int, buffer: int) -> Variant:
    from torchdata.stateful_dataloader import StatefulDataLoader

    def run(shards: list[str]) -> tuple[float, float]:
        loader = StatefulDataLoader(
            pipe(shards, buffer), batch_size=32, num_workers=2, snapshot_every_n_steps=every
        )
        return epoch_rate(loader)

    return run


def variants(kind: str, buffer: int) -> dict[str, Variant]:
    found = {
        "conveyor off": conveyor_variant(kind, 0, buffer),
        "conveyor on": conveyor_variant(kind, None, buffer),
        "conveyor on + state_dict()": conveyor_variant(kind, None, buffer, calls=True),
    }
    if kind == "process":
        found["torchdata off"] = torchdata_variant(0, buffer)
        found["torchdata on"] = torchdata_variant(1, buffer)
    return found


def measure(
    shards: list[str], kind: str, buffer: int, reps: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per variant: samples/s and samples per CPU second of each repetition."""
    runs = variants(kind, buffer)
    names = list(runs)
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu_rates: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        runs[name](shards)  # warm the page cache and imports once
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu = runs[name](shards)
            rates[name].append(wall)
            cpu_rates[name].append(cpu)
    return rates, cpu_rates


def ratio(rates: dict[str, list[float]], name: str, base: str) -> float:
    return statistics.median(a / b for a, b in zip(rates[name], rates[base], strict=True))


def state_sizes(shards: list[str], buffer: int) -> dict[str, int]:
    """Bytes of a mid-epoch state of the shuffled pipe (its buffer full), as saved."""
    dataset = pipe(shards, buffer)
    iterator = iter(dataset)
    for _ in range(buffer + 100):
        next(iterator)
    state = dataset.state_dict()
    saved = io.BytesIO()
    torch.save(state, saved)
    from conveyor.stateful_dataloader.torchdata_state import to_json

    return {
        "torch.save": len(saved.getvalue()),
        "pickle": len(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)),
        "json": len(json.dumps(to_json(state))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "conveyor-ckpt"))
    parser.add_argument("--buffer", type=int, default=1000)
    parser.add_argument("--kinds", default="process,thread")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = {
        "50 kB": write_shards(os.path.join(args.data, "50k"), 2000, 50_000, 125),
        "1 kB": write_shards(os.path.join(args.data, "1k"), 20000, 1_000, 1250),
    }
    print(f"load before: {os.getloadavg()}")
    for size in ("1 kB", "50 kB"):
        sizes = state_sizes(data["1 kB"], 10_000) if size == "1 kB" else None
        if sizes:
            print(f"state of TarShards(shuffle_buffer=10_000), bytes: {sizes}")
    print(
        f"state of TarShards(shuffle_buffer={args.buffer}), bytes: "
        f"{state_sizes(data['50 kB'], args.buffer)}"
    )
    for size, shards in data.items():
        for kind in args.kinds.split(","):
            rates, cpu_rates = measure(shards, kind, args.buffer, args.reps)
            print(f"\n{size} samples, {kind} workers, shuffle_buffer={args.buffer}:")
            for name, values in rates.items():
                base = "torchdata off" if name.startswith("torchdata") else "conveyor off"
                print(
                    f"  {name:28s} {statistics.median(values):7.0f} samples/s "
                    f"x{ratio(rates, name, base):.3f} | "
                    f"{statistics.median(cpu_rates[name]):7.0f} samples/CPU-s "
                    f"x{ratio(cpu_rates, name, base):.3f} of {base}"
                )
    print(f"\nload after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
