"""Autotune against a grid of fixed settings, under a simulated trainer.

The trainer is the main thread alternating ``next(loader)`` with a step of fixed duration
that blocks (a GPU step: no CPU). Datasets:

- decode-bound: 1.5 ms of Python CPU per sample, process workers, batch ``2 x CPUs``;
- I/O latency: a 5 ms sleep per sample, thread workers, batch ``2 x CPUs``;
- IPC-bound: 1 MB tensors per sample through process workers' shared memory;
- remote tar shards over HTTP through S7's latency proxy (tests/integration/latency_proxy.py)
  at 25 and 100 ms round trip: `TarShards` (a stream: autotune tunes the prefetch depth
  and the remote read-ahead, never the worker count), thread workers. Needs fsspec and
  aiohttp (``conveyor[remote]``) and the tests' helpers; skipped without them.

The grids and ceilings scale with ``os.cpu_count()``. For each dataset, every fixed
``num_workers`` of the grid and autotune (``autotune=True``, its defaults; the grid's largest
count as ceiling) run one epoch, interleaved over ``--reps`` rounds; medians. Reported:
CPU seconds per sample (this process and its reaped workers), exposed data wait (time in
``next()`` over the steps' time) over the whole epoch and after settling, and when
autotune settled. Then the step-time change: an autotuned epoch whose step doubles (or
halves) half way: seconds from the change to autotune's last decision, and how far the
active workers moved in the last half after it (oscillation).

    python benchmarks/autotune.py --reps 3          # this machine, a few minutes on 2 cores
    python benchmarks/autotune.py --quick           # about 1-3 minutes on 16 cores
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from conveyor import AutotuneOptions, DataLoader

HERE = Path(__file__).resolve().parent
CPUS = os.cpu_count() or 1


def _spin(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


class Decode:
    """1.5 ms of Python CPU per sample (a decode that holds the GIL)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        _spin(0.0015)
        return i


class Latency(Decode):
    """5 ms of latency per sample (an object store's first byte)."""

    def __getitem__(self, i: int) -> int:
        time.sleep(0.005)
        return i


class Large(Decode):
    """1 MB per sample: the cost is carrying it to the main process."""

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((1 << 20,), i % 256, dtype=torch.uint8)


@dataclass
class Case:
    name: str
    make: Callable[[], Any]  # the dataset
    batch_size: int
    worker_type: str
    grid: tuple[int, ...]  # fixed num_workers tried; autotune's ceiling is the largest
    step_s: float
    loader_options: dict[str, Any] = field(default_factory=dict)
    tune_each: bool = False  # a stream keeps its workers: autotune at every ceiling


def _powers(most: int) -> tuple[int, ...]:
    counts, count = [], 1
    while count < most:
        counts.append(count)
        count *= 2
    return (*counts, most)


def local_cases(batches: int, quick: bool) -> list[Case]:
    """The datasets in memory, sized to ``batches`` batches an epoch."""
    batch = 2 * CPUS  # decode: 3 ms x CPUs of work a batch against an 8 ms step
    decode_grid = _powers(CPUS)
    latency_grid = tuple(k * CPUS for k in (1, 2, 3, 4))  # a batch needs about 2.4 x CPUs
    ipc_grid = _powers(min(4, CPUS) if quick else CPUS)
    if not quick:
        latency_grid = (1, *latency_grid)
    return [
        Case("decode-bound", lambda: Decode(batches * batch), batch, "process", decode_grid, 0.008),
        Case("I/O latency", lambda: Latency(batches * batch), batch, "thread", latency_grid, 0.005),
        Case("IPC-bound", lambda: Large(batches * 4), 4, "process", ipc_grid, 0.004),
    ]


@dataclass
class Result:
    cpu_per_sample_ms: float
    exposed_wait: float  # time in next() over step time, the whole epoch
    steady_wait: float  # the same after settling (autotune's last change; fixed: batch 16)
    settled_s: float  # autotune: seconds from the first batch to its last decision
    final_workers: int
    read_ahead: int  # autotune's last read-ahead (blocks; 0: the readers' own)
    tasks_in_flight: int


def _cpu_s() -> float:
    """This process's CPU time at the clock's resolution (thread workers run here), plus
    its reaped children's (process workers), which the kernel gives in 10 ms ticks."""
    times = os.times()
    return time.process_time() + times.children_user + times.children_system


def _epoch(loader: DataLoader[Any], step: Callable[[int], float]) -> Result:
    cpu = _cpu_s()
    stamps: list[float] = []
    waits: list[float] = []
    steps: list[float] = []
    samples = 0
    iterator = iter(loader)
    while True:
        asked = time.perf_counter()
        batch = next(iterator, None)
        if batch is None:
            break
        stamps.append(time.perf_counter())
        waits.append(stamps[-1] - asked)
        samples += len(batch)
        time.sleep(step(len(stamps) - 1))  # the training step (blocks, as on a GPU)
        steps.append(time.perf_counter() - stamps[-1])
    del batch, iterator
    cpu = _cpu_s() - cpu  # the epoch ended: its process workers were reaped
    decisions = loader.stats().decisions
    last = decisions[-1].batch if decisions else 0
    settled = stamps[min(last, len(stamps) - 1)] - stamps[0] if decisions else 0.0
    final = decisions[-1] if decisions else None
    # settled: the tasks in flight at autotune's last change were delivered
    before = decisions[-2].tasks_in_flight if len(decisions) > 1 else _initial(loader) * 2
    after = min(max(16, last + 1 + (before if decisions else 0)), len(steps) - 8)
    return Result(
        1e3 * cpu / samples,
        sum(waits[1:]) / sum(steps),
        sum(waits[after:]) / sum(steps[after:]),
        settled,
        final.active_workers if final else _initial(loader),
        final.read_ahead if final else 0,
        final.tasks_in_flight if final else _initial(loader) * (loader.prefetch_factor or 2),
    )


def _initial(loader: DataLoader[Any]) -> int:
    """Workers taking tasks before any decision: all of them, or autotune's start (a
    stream's are all of them)."""
    if not loader.autotune or isinstance(loader.dataset, torch.utils.data.IterableDataset):
        return loader.num_workers
    return min(loader.num_workers, len(os.sched_getaffinity(0)))


def _loader(case: Case, workers: int, autotune: bool) -> DataLoader[Any]:
    return DataLoader(
        case.make(),
        batch_size=case.batch_size,
        num_workers=workers,
        worker_type=case.worker_type,
        autotune=AutotuneOptions() if autotune else False,
        **case.loader_options,
    )


def grid(case: Case, reps: int) -> None:
    runs: dict[str, list[Result]] = {}
    ceiling = max(case.grid)
    for _ in range(reps):
        for workers in case.grid:
            runs.setdefault(f"fixed {workers}", []).append(
                _epoch(_loader(case, workers, False), lambda _: case.step_s)
            )
        for workers in case.grid if case.tune_each else (ceiling,):
            name = f"autotune {workers}" if case.tune_each else "autotune"
            runs.setdefault(name, []).append(
                _epoch(_loader(case, workers, True), lambda _: case.step_s)
            )
    print(
        f"\n{case.name}: {case.worker_type} workers, batch {case.batch_size}, "
        f"step {case.step_s * 1e3:.0f} ms, ceiling {ceiling}",
        flush=True,
    )
    print("| setting | CPU ms/sample | exposed wait | after settling | settled after | workers |")
    print("|---|---|---|---|---|---|")
    for name, results in runs.items():
        tuned = name.startswith("autotune")
        settled = f"{m(results, 'settled_s'):.1f} s" if tuned else ""
        workers = f"{m(results, 'final_workers'):g}" if tuned else name.split()[1]
        if tuned:
            workers += f" ({m(results, 'tasks_in_flight'):g} in flight"
            ahead = m(results, "read_ahead")
            workers += f", read-ahead {ahead:g})" if ahead else ")"
        print(
            f"| {name} | {m(results, 'cpu_per_sample_ms'):.3f} | "
            f"{m(results, 'exposed_wait'):.1%} | {m(results, 'steady_wait'):.1%} | {settled} | "
            f"{workers} |"
        )
    fed = [
        m(r, "cpu_per_sample_ms")
        for n, r in runs.items()
        if n.startswith("fixed") and m(r, "steady_wait") <= 0.02
    ]
    if not fed:
        print("no fixed setting kept the wait at or under 2 %", flush=True)
    for name, results in runs.items():
        if fed and name.startswith("autotune"):
            ratio = m(results, "cpu_per_sample_ms") / min(fed)
            print(f"{name} CPU/sample over the best fixed setting with <= 2 % wait: "
                  f"{ratio:.2f}x", flush=True)  # fmt: skip


def m(results: list[Result], name: str) -> float:
    return statistics.median(getattr(r, name) for r in results)


def step_change(case: Case, reps: int) -> None:
    ceiling = max(case.grid)
    print(f"\nstep change ({case.name}, {case.worker_type} workers, ceiling {ceiling})")
    print("| step | re-settled after | workers in the last half after the change: max - min "
          "| reversals (up after down or down after up) |")  # fmt: skip
    print("|---|---|---|---|")
    for before, after in ((case.step_s, 2 * case.step_s), (2 * case.step_s, case.step_s)):
        settle, spread, reversals = [], [], []
        for _ in range(reps):
            loader = _loader(case, ceiling, True)
            half = len(loader) // 2
            stamps: list[float] = []
            for index, _batch in enumerate(loader):
                stamps.append(time.perf_counter())
                time.sleep(before if index < half else after)
            decisions = loader.stats().decisions
            later = [d for d in decisions if d.batch >= half]
            settle.append(stamps[min(later[-1].batch, len(stamps) - 1)] - stamps[half]
                          if later else 0.0)  # fmt: skip
            end, initial = len(stamps), _initial(loader)
            tail = [_active_at(decisions, b, initial) for b in range((half + end) // 2, end)]
            spread.append(max(tail) - min(tail))
            reversals.append(_reversals(tail))
        label = f"{before * 1e3:.0f} -> {after * 1e3:.0f} ms"
        print(f"| {label} | {statistics.median(settle):.1f} s | {max(spread)} | "
              f"{max(reversals)} |", flush=True)  # fmt: skip


def _reversals(actives: list[int]) -> int:
    """How often the worker count turned: up after down, or down after up."""
    moves = [b - a for a, b in itertools.pairwise(actives) if b != a]
    return sum(1 for a, b in itertools.pairwise(moves) if (a > 0) != (b > 0))


def _active_at(decisions: Any, batch: int, initial: int) -> int:
    """Workers taking tasks when ``batch`` was delivered."""
    active = initial
    for decision in decisions:
        if decision.batch > batch:
            break
        active = decision.active_workers
    return active


# ------------------------------------------------------------------ remote (S7's proxy)

REMOTE_SAMPLE_BYTES = 16 << 10
REMOTE_BLOCK_BYTES = 256 << 10


class _NoRemote(Exception):
    """What the remote cases need is missing here."""


@contextlib.contextmanager
def _http_shards(root: Path, shards: int, per_shard: int) -> Iterator[str]:
    """Tar shards of random bytes served over HTTP (Range) from ``root`` by a child process
    (its CPU is not the loader's); yields its ``host:port``."""
    import json
    import subprocess

    from conveyor.formats import ShardWriter

    payload = os.urandom(REMOTE_SAMPLE_BYTES)
    with ShardWriter(str(root / "part-%04d.tar"), max_count=per_shard) as writer:
        for i in range(shards * per_shard):
            writer.write({"__key__": f"{i:07d}", "bin": payload, "cls": i})
    command = [sys.executable, __file__, "--serve", str(root)]
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    try:
        line = server.stdout.readline()
        if not line:
            raise _NoRemote("the HTTP server did not start (tests/integration/remote_servers.py)")
        yield f"127.0.0.1:{json.loads(line)['port']}"
    finally:
        server.stdin.close()  # it stops when its standard input closes
        server.wait(timeout=10)
        server.stdout.close()


def serve(root: str) -> None:
    """``--serve DIR``: the tests' Range-capable HTTP server on DIR until stdin closes."""
    import functools
    import json
    import threading

    sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
    from remote_servers import QuietServer, RangeHandler

    handler = type("Handler", (RangeHandler,), {"log": []})
    server = QuietServer(("127.0.0.1", 0), functools.partial(handler, directory=root))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    sys.stdin.read()
    server.shutdown()
    server.server_close()


def remote_cases(batches: int, quick: bool) -> Iterator[Case]:
    """TarShards over HTTP through the latency proxy at 25 and 100 ms; raises `_NoRemote`."""
    for module in ("fsspec", "aiohttp", "pytest"):  # pytest: the tests' server module
        try:
            __import__(module)
        except ImportError:
            raise _NoRemote(f"{module} is not installed (pip install conveyor[remote])") from None
    sys.path.insert(0, str(HERE.parent / "tests" / "integration"))  # S7's proxy, servers
    from latency_proxy import LinkSettings, ProxyProcess

    from conveyor.datapipes.iter import TarShards
    from conveyor.storage import release_connections

    batch, per_shard = 32, 256  # 4 MiB shards of 16 KiB samples, 256 KiB blocks
    shards = max(2 * CPUS, -(-batches * batch // per_shard))
    grid = (1, 2, 4) if quick else (1, 2, 4, 8)
    with tempfile.TemporaryDirectory() as root, _http_shards(Path(root), shards, per_shard) as up:
        for rtt in (0.025, 0.1):
            with ProxyProcess(up, LinkSettings(rtt=rtt)) as proxy:
                urls = [f"{proxy.endpoint}/part-{i:04d}.tar" for i in range(shards)]

                def make(urls: list[str] = urls) -> Any:
                    return TarShards(urls, decode=None, block_size=REMOTE_BLOCK_BYTES)

                name = f"remote tar shards, HTTP at {rtt * 1e3:.0f} ms"
                options = {"collate_fn": _count}
                yield Case(name, make, batch, "thread", grid, 0.010, options, tune_each=True)
                release_connections()


def _count(samples: list[dict[str, Any]]) -> list[int]:
    """Collate to a list as long as the batch (the trainer counts samples)."""
    return [len(sample["bin"]) for sample in samples]


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=None, help="rounds (default 3; quick 2)")
    parser.add_argument("--quick", action="store_true", help="smaller epochs and grids")
    parser.add_argument("--no-remote", action="store_true", help="skip the HTTP cases")
    parser.add_argument("--only", default="", help="run only cases whose name has this")
    args = parser.parse_args()
    reps = args.reps or (2 if args.quick else 3)
    batches = 150 if args.quick else 400
    torch.set_num_threads(1)
    print(f"{CPUS} CPUs; load average before: {os.getloadavg()}", flush=True)
    cases = local_cases(batches, args.quick)
    for case in cases:
        if args.only in case.name:
            grid(case, reps)
    if args.only in "step change":
        step_change(cases[1], reps)
    if not args.no_remote:
        try:
            for case in remote_cases(batches, args.quick):
                if args.only in case.name:
                    grid(case, reps)
        except _NoRemote as missing:
            print(f"\nremote cases skipped: {missing}")
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
