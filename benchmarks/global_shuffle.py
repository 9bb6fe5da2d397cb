"""GlobalShuffleSampler against torch.randperm / RandomSampler and Grain's index_shuffle.

For each dataset size: time to the first index, indices per second (conveyor through
``permutation()`` blocks and through ``__iter__``; torch generating ``randperm(n)`` and
iterating ``RandomSampler``; Grain calling ``index_shuffle`` once per index, as its
``MapDataset.shuffle`` does), and peak memory (growth of a fresh child process's peak RSS,
the kernel's VmHWM, over one epoch's set-up plus the first 2**20 indices). Timings are
interleaved over repetitions (rotating order) and reported as medians with paired
ratios. Times are CPU seconds of the measuring process (``--clock wall`` for wall time):
on a shared machine they show what one core does. Grain runs in its own virtual
environment (``--grain-python``; never a conveyor dependency).

    python benchmarks/global_shuffle.py --sizes 1e6,1e7,1e8,1e9 --reps 5 \
        --grain-python ~/.cache/conveyor-grain/bin/python
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

THROUGHPUT_INDICES = 1 << 23  # indices timed per throughput measurement (or n if smaller)
MEMORY_INDICES = 1 << 20
GRAIN_CALLS = 200_000


# Measurements: each returns seconds (or bytes), run in this process or in a child. ------

# CPU seconds of this process by default: on a shared, oversubscribed machine they measure
# the work one core does, where wall time mostly measures the neighbours (--clock wall).
_CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
_clock = _CLOCKS["cpu"]


def conveyor_first(n: int) -> float:
    from conveyor import GlobalShuffleSampler

    start = _clock()
    next(iter(GlobalShuffleSampler(n, seed=1, num_replicas=1, rank=0)))
    return _clock() - start


def conveyor_blocks(n: int) -> float:
    """Seconds for ``min(n, THROUGHPUT_INDICES)`` indices via ``permutation()`` blocks."""
    from conveyor import GlobalShuffleSampler

    sampler = GlobalShuffleSampler(n, seed=1, num_replicas=1, rank=0)
    total = min(n, THROUGHPUT_INDICES)
    start = _clock()
    for begin in range(0, total, 1 << 16):
        sampler.permutation(begin, min(total, begin + (1 << 16)))
    return _clock() - start


def conveyor_iter(n: int) -> float:
    from conveyor import GlobalShuffleSampler

    total = min(n, THROUGHPUT_INDICES)
    start = _clock()
    iterator = iter(GlobalShuffleSampler(n, seed=1, num_replicas=1, rank=0))
    collections.deque(itertools.islice(iterator, total), maxlen=0)
    return _clock() - start


def torch_first(n: int) -> float:
    import torch

    generator = torch.Generator().manual_seed(1)
    start = _clock()
    int(torch.randperm(n, generator=generator)[0])
    return _clock() - start


def torch_iter(n: int) -> float:
    """Seconds for RandomSampler to deliver all ``n`` indices (randperm + list + loop)."""
    import torch

    sampler = torch.utils.data.RandomSampler(range(n), generator=torch.Generator().manual_seed(1))
    start = _clock()
    collections.deque(iter(sampler), maxlen=0)
    return _clock() - start


def grain_first(n: int) -> float:
    from grain.experimental import index_shuffle

    start = _clock()
    index_shuffle(0, max_index=n - 1, seed=1, rounds=4)
    return _clock() - start


def grain_calls(n: int) -> float:
    """Seconds for ``min(n, GRAIN_CALLS)`` indices, one ``index_shuffle`` call each."""
    from grain.experimental import index_shuffle

    total = min(n, GRAIN_CALLS)
    start = _clock()
    for i in range(total):
        index_shuffle(i, max_index=n - 1, seed=1, rounds=4)
    return _clock() - start


def conveyor_memory(n: int) -> None:
    from conveyor import GlobalShuffleSampler

    iterator = iter(GlobalShuffleSampler(n, seed=1, num_replicas=1, rank=0))
    collections.deque(itertools.islice(iterator, min(n, MEMORY_INDICES)), maxlen=0)


def torch_memory(n: int) -> None:
    import torch

    order = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    collections.deque(itertools.islice(iter(order[:MEMORY_INDICES].tolist()), n), maxlen=0)


def grain_memory(n: int) -> None:
    from grain.experimental import index_shuffle

    for i in range(min(n, MEMORY_INDICES)):
        index_shuffle(i, max_index=n - 1, seed=1, rounds=4)


CHILD: dict[str, Callable[[int], Any]] = {
    name: fn
    for name, fn in globals().items()
    if callable(fn) and name.split("_")[0] in {"conveyor", "torch", "grain"}
}


def child_main(what: str, n: int) -> None:
    """Run one measurement in this (fresh) process and print its JSON result."""
    if what.endswith("_memory"):
        if what.startswith("torch"):
            import torch  # imported before the baseline: the import is not the sampler's

            torch.set_num_threads(1)
        elif what.startswith("conveyor"):
            import conveyor  # noqa: F401
        else:
            import grain.experimental  # noqa: F401
        before = _reset_peak_rss()
        CHILD[what](n)
        print(json.dumps({"bytes": _peak_rss() - before}))
        return
    CHILD[what](min(n, 1000))  # warm up imports and caches
    print(json.dumps({"seconds": CHILD[what](n)}))


def _reset_peak_rss() -> int:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS; return that RSS."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status_bytes("VmRSS")


def _peak_rss() -> int:
    return _status_bytes("VmHWM")


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


# Driver ------------------------------------------------------------------------------


def _clock_name() -> str:
    return next(name for name, fn in _CLOCKS.items() if fn is _clock)


def run_child(python: str, what: str, n: int) -> dict[str, float]:
    done = subprocess.run(
        [python, __file__, "--child", what, "--n", str(n), "--clock", _clock_name()],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _plan(peer: str, n: int, args: argparse.Namespace) -> dict[str, str]:
    """metric -> measurement for ``peer`` at size ``n`` (torch skips what would not fit)."""
    if peer == "conveyor":
        return {"first": "conveyor_first", "rate": "conveyor_blocks", "iter": "conveyor_iter"}
    if peer == "grain":
        return {"first": "grain_first", "rate": "grain_calls"}
    plan = {"first": "torch_first"} if n <= args.memory_max else {}  # randperm(n): 8n bytes
    if n <= args.torch_list_max:
        plan["iter"] = "torch_iter"  # RandomSampler's list: 8n + 28n bytes of Python ints
    return plan


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    peers = ["conveyor", "torch"] + (["grain"] if args.grain_python else [])
    python = {"conveyor": sys.executable, "torch": sys.executable, "grain": args.grain_python}
    rows = []
    for n in args.sizes:
        samples: dict[str, list[float]] = collections.defaultdict(list)
        for rep in range(args.reps):
            order = peers[rep % len(peers) :] + peers[: rep % len(peers)]  # rotate: interleaved
            for peer in order:
                for metric, what in _plan(peer, n, args).items():
                    if peer != "grain" and n <= args.in_process_max:
                        seconds = CHILD[what](n)
                    else:  # grain lives in its own venv; huge torch runs get a fresh process
                        seconds = run_child(python[peer], what, n)["seconds"]
                    samples[f"{peer}_{metric}"].append(seconds)
        for peer in peers:
            if peer != "torch" or n <= args.memory_max:
                memory = run_child(python[peer], f"{peer}_memory", n)["bytes"]
                samples[f"{peer}_memory"] = [memory]
        rows.append(_summary(n, samples))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _indices_timed(peer: str, metric: str, n: int) -> int:
    if peer == "conveyor" and metric != "first":
        return min(n, THROUGHPUT_INDICES)
    if peer == "grain":
        return min(n, GRAIN_CALLS)
    return n  # torch builds the whole permutation (first) or delivers all of it (iter)


def _summary(n: int, samples: dict[str, list[float]]) -> dict[str, Any]:
    row: dict[str, Any] = {"n": n}
    if "torch_first" in samples:  # randperm(n) is both torch's first index and its rate
        samples["torch_rate"] = samples["torch_first"]
    for key, values in samples.items():
        peer, metric = key.split("_")
        if metric == "memory":
            row[key + "_bytes"] = values[0]
        elif metric == "first":
            row[key + "_ms"] = statistics.median(values) * 1e3
        else:
            count = _indices_timed(peer, metric, n)
            row[f"{key}_M_per_s"] = statistics.median(count / s / 1e6 for s in values)
    for peer in ("torch", "grain"):
        if f"{peer}_first" in samples:
            pairs = zip(samples[f"{peer}_first"], samples["conveyor_first"], strict=True)
            row[f"first_index_speedup_vs_{peer}"] = statistics.median(t / c for t, c in pairs)
    for peer, metric in (("torch", "rate"), ("grain", "rate"), ("torch", "iter")):
        if f"{peer}_{metric}" in samples:
            theirs_count = _indices_timed(peer, metric, n)
            ours_count = _indices_timed("conveyor", metric, n)
            pairs = zip(samples[f"conveyor_{metric}"], samples[f"{peer}_{metric}"], strict=True)
            row[f"{metric}_ratio_vs_{peer}"] = statistics.median(
                (ours_count / ours) / (theirs_count / theirs) for ours, theirs in pairs
            )
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    def cell(row: dict[str, Any], key: str, fmt: str) -> str:
        return format(row[key], fmt) if key in row else "-"

    print(
        "| n | first index ms: conveyor / torch / grain | M idx/s: conveyor permutation() "
        "/ conveyor __iter__ / torch randperm / torch RandomSampler / grain | peak MB: "
        "conveyor / torch / grain |"
    )
    print("|---|---|---|---|")
    for row in rows:
        first = " / ".join(
            cell(row, f"{p}_first_ms", ".3f") for p in ("conveyor", "torch", "grain")
        )
        rates = " / ".join(
            cell(row, key, ".1f")
            for key in (
                "conveyor_rate_M_per_s",
                "conveyor_iter_M_per_s",
                "torch_rate_M_per_s",
                "torch_iter_M_per_s",
                "grain_rate_M_per_s",
            )
        )
        memory = " / ".join(
            format(row[f"{p}_memory_bytes"] / 2**20, ".1f") if f"{p}_memory_bytes" in row else "-"
            for p in ("conveyor", "torch", "grain")
        )
        print(f"| {row['n']:.0e} | {first} | {rates} | {memory} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1e6,1e7,1e8")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--grain-python", default="")
    parser.add_argument("--in-process-max", type=float, default=1e8)
    parser.add_argument("--memory-max", type=float, default=1e9, help="largest n for randperm")
    parser.add_argument("--torch-list-max", type=float, default=1e7)
    parser.add_argument("--child", default="")
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--clock", choices=sorted(_CLOCKS), default="cpu")
    args = parser.parse_args()
    global _clock
    _clock = _CLOCKS[args.clock]
    if args.child:
        child_main(args.child, args.n)
        return
    args.sizes = [int(float(s)) for s in args.sizes.split(",")]
    if args.grain_python:
        args.grain_python = str(Path(args.grain_python).expanduser())
    import torch

    torch.set_num_threads(1)
    print(f"clock: {args.clock}")
    print_table(measure(args))


if __name__ == "__main__":
    main()
