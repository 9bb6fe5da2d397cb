"""conveyor.Mixture against torchdata.nodes.MultiNodeWeightedSampler (i.i.d. draws).

For each configuration, both mix the same weights over sources whose items name their
source, and we report: the worst deviation, over every window of 1,000 consecutive samples
and every source, between the source's count and its weight x 1,000 (and the 99th
percentile of each window's worst source); samples per second (medians over interleaved
repetitions, rotating order); and the size of a checkpoint taken after the run (JSON for
conveyor; pickled for torchdata, whose state holds a torch generator state). torchdata
runs in a separate virtual environment (``--peer-python``, with torch and torchdata):

    python benchmarks/mixture.py --samples 200000 --reps 5 \
        --peer-python ~/.cache/conveyor-grain/bin/python
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import pickle
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

WINDOW = 1000


def weights_for(config: str) -> list[float]:
    """``"<sources>-thousandths"``: exactly representable weights (+-1 per 1,000 is then
    achievable); ``"<sources>-floats"``: arbitrary weights (rounded to 1/65,536)."""
    count, kind = config.split("-")
    sources = int(count)
    rng = np.random.default_rng(sources)
    if kind == "floats":
        return rng.random(sources).tolist()
    if sources == 3:
        return [0.5, 0.3, 0.2]
    raw = rng.integers(1, 20, sources)
    shares = 1 + np.floor(raw / raw.sum() * (1000 - sources)).astype(int)  # none is zero
    shares[np.argmax(shares)] += 1000 - shares.sum()
    return (shares / 1000).tolist()


def conveyor_run(config: str, samples: int, kind: str) -> tuple[float, list[int], int]:
    from conveyor import Mixture

    weights = weights_for(config)
    sources = len(weights)
    if kind == "map":
        named: dict[str, Any] = {f"s{i}": [i] * samples for i in range(sources)}
    else:
        named = {f"s{i}": itertools.repeat(i, samples) for i in range(sources)}
    mixture = Mixture(named, weights, stop_on="never")
    start = time.perf_counter()
    order = list(itertools.islice(iter(mixture), samples))
    seconds = time.perf_counter() - start
    return seconds, order, len(json.dumps(mixture.state_dict()))


def torchdata_run(config: str, samples: int) -> tuple[float, list[int], int]:
    from torchdata.nodes import IterableWrapper
    from torchdata.nodes.samplers.multi_node_weighted_sampler import MultiNodeWeightedSampler

    weights = weights_for(config)
    sources = len(weights)
    nodes = {f"s{i}": IterableWrapper(itertools.repeat(i, samples)) for i in range(sources)}
    sampler = MultiNodeWeightedSampler(
        nodes, {f"s{i}": w for i, w in enumerate(weights)}, rank=0, world_size=1, seed=0
    )
    start = time.perf_counter()
    order = list(itertools.islice(sampler, samples))
    seconds = time.perf_counter() - start
    return seconds, order, len(pickle.dumps(sampler.state_dict()))


def window_deviation(order: list[int], weights: list[float]) -> tuple[float, float]:
    """Worst |count - w * 1000| over all windows and sources; p99 of each window's worst."""
    weights = (np.asarray(weights) / np.sum(weights)).tolist()
    ids = np.asarray(order)
    hot = np.zeros((ids.size + 1, len(weights)), dtype=np.int64)
    hot[np.arange(1, ids.size + 1), ids] = 1
    counts = np.cumsum(hot, axis=0)
    windows = counts[WINDOW:] - counts[:-WINDOW]
    worst = np.abs(windows - np.asarray(weights) * WINDOW).max(axis=1)
    return float(worst.max()), float(np.percentile(worst, 99))


def child_main(config: str, samples: int) -> None:
    seconds, order, state_bytes = torchdata_run(config, samples)
    print(json.dumps({"seconds": seconds, "order": order, "state_bytes": state_bytes}))


def peer(python: str, config: str, samples: int) -> tuple[float, list[int], int]:
    done = subprocess.run(
        [python, __file__, "--child", config, "--samples", str(samples)],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    row = json.loads(done.stdout.strip().splitlines()[-1])
    return row["seconds"], row["order"], row["state_bytes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--configs", default="3-thousandths,3-floats,100-thousandths,100-floats")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--peer-python", default="")
    parser.add_argument("--child", default="")
    args = parser.parse_args()
    if args.child:
        child_main(args.child, args.samples)
        return
    print("| weights | mixer | worst dev /1000 | p99 dev /1000 | samples/s | state bytes |")
    print("|---|---|---|---|---|---|")
    for config in args.configs.split(","):
        runners = {
            "conveyor map-style": lambda c=config: conveyor_run(c, args.samples, "map"),
            "conveyor streams": lambda c=config: conveyor_run(c, args.samples, "stream"),
        }
        if args.peer_python:
            runners["torchdata MultiNodeWeightedSampler"] = lambda c=config: peer(
                args.peer_python, c, args.samples
            )
        rates: dict[str, list[float]] = collections.defaultdict(list)
        last: dict[str, tuple[list[int], int]] = {}
        names = list(runners)
        for rep in range(args.reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                seconds, order, state_bytes = runners[name]()
                rates[name].append(args.samples / seconds)
                last[name] = (order, state_bytes)
        for name in names:
            order, state_bytes = last[name]
            worst, p99 = window_deviation(order, weights_for(config))
            rate = statistics.median(rates[name])
            print(f"| {config} | {name} | {worst:.2f} | {p99:.2f} | {rate:,.0f} | {state_bytes} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
