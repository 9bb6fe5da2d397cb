#!/usr/bin/env python
"""Host-to-device copies of loader batches, and the pin thread's CPU, conveyor vs torch.

S1-shaped batches (``--batch-size`` x 3x224x224 uint8, from a pool of 64 in-memory images)
with ``pin_memory=True`` and ``--workers`` worker processes. Configurations, interleaved
(the order flips every rep), medians over ``--reps``:

  bare            one pinned tensor (``torch.empty(..., pin_memory=True)``) of a batch's
                  bytes copied with ``.to("cuda", non_blocking=True)`` on a side stream:
                  the bound (a bare pinned cudaMemcpyAsync)
  conveyor        conveyor.DataLoader: workers' slabs registered as pinned memory
                  (transport/cuda_host.py), no copy in the pin thread
  conveyor-copy   the same with CONVEYOR_REGISTER_SLABS=0: the pin thread copies each batch
                  into pinned memory, as torch does
  torch           torch.utils.data.DataLoader(pin_memory=True)

Per loader: GB/s of the H2D copy of the batches it delivered (``--hold`` batches kept, then
copied back to back on one stream, timed by CUDA events; compared with ``bare``), the pin
thread's CPU seconds per GB delivered (/proc/self/task/<tid>/stat, over ``--batches``
batches), and end-to-end GB/s of ``conveyor.to_device(loader, "cuda")`` for the conveyor
rows. Targets (issue 29): H2D >= 0.8x bare; pin-thread CPU/GB <= 0.1x torch's.

    python benchmarks/gpu_h2d.py                       # on a GPU machine
    python benchmarks/gpu_h2d.py --smoke               # the code paths on the CPU
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from typing import Any

import torch
import torch.utils.data as tud

import conveyor
from conveyor.transport.cuda_host import ENV_REGISTER_SLABS
from gpu_common import emit, machine, median, pick_device, pin_thread, thread_cpu_s

SHAPE = (3, 224, 224)


class Pool(tud.Dataset[torch.Tensor]):
    def __init__(self, length: int) -> None:
        self.length = length
        self.images = torch.randint(0, 255, (64, *SHAPE), dtype=torch.uint8)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.images[index % 64]


def make_loader(name: str, args: argparse.Namespace, length: int, pin: bool) -> Any:
    cls = tud.DataLoader if name == "torch" else conveyor.DataLoader
    if name == "conveyor-copy":
        os.environ[ENV_REGISTER_SLABS] = "0"
    else:
        os.environ.pop(ENV_REGISTER_SLABS, None)
    return cls(Pool(length), batch_size=args.batch_size, num_workers=args.workers,
               pin_memory=pin, prefetch_factor=2)  # fmt: skip


def copy_gbps(batches: list[torch.Tensor], device: torch.device) -> float:
    """GB/s of copying ``batches`` to ``device`` back to back on one side stream."""
    if device.type != "cuda":
        start = time.perf_counter()
        for batch in batches:
            batch.to(device, copy=True)
        return sum(b.nbytes for b in batches) / 1e9 / max(time.perf_counter() - start, 1e-9)
    stream = torch.cuda.Stream()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        for batch in batches[:2]:  # warm the path
            batch.to(device, non_blocking=True)
        begin.record(stream)
        for batch in batches:
            batch.to(device, non_blocking=True)
        end.record(stream)
    end.synchronize()
    return sum(b.nbytes for b in batches) / 1e9 / (begin.elapsed_time(end) / 1e3)


def run_bare(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    pinned = device.type == "cuda"
    buffer = torch.empty((args.batch_size, *SHAPE), dtype=torch.uint8, pin_memory=pinned)
    return {"h2d_gbps": copy_gbps([buffer] * args.hold, device)}


def run_loader(name: str, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    pin = device.type == "cuda"
    loader = make_loader(name, args, args.batch_size * (args.batches + args.hold + 8), pin)
    iterator = iter(loader)
    held = [next(iterator) for _ in range(args.hold)]
    result: dict[str, Any] = {"pinned": all(b.is_pinned() for b in held) if pin else None}
    result["h2d_gbps"] = copy_gbps(held, device)
    del held
    thread = pin_thread() if pin else None
    cpu_before = thread_cpu_s(thread.native_id) if thread and thread.native_id else 0.0
    start = time.perf_counter()
    nbytes = 0
    for _ in range(args.batches):
        nbytes += next(iterator).nbytes
    seconds = time.perf_counter() - start
    if thread is not None and thread.native_id:
        result["pin_cpu_s_per_gb"] = (thread_cpu_s(thread.native_id) - cpu_before) / (nbytes / 1e9)
    result["loader_gbps"] = nbytes / 1e9 / seconds
    del iterator
    gc.collect()
    if name.startswith("conveyor"):
        result["to_device_gbps"] = to_device_gbps(name, args, device)
    return result


def to_device_gbps(name: str, args: argparse.Namespace, device: torch.device) -> float:
    loader = make_loader(name, args, args.batch_size * (args.batches + 4), device.type == "cuda")
    batches = iter(conveyor.to_device(loader, device, depth=2))
    next(batches)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    nbytes = sum(next(batches).nbytes for _ in range(args.batches))
    if device.type == "cuda":
        torch.cuda.synchronize()
    return nbytes / 1e9 / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batches", type=int, default=60, help="batches timed per loader")
    parser.add_argument("--hold", type=int, default=8, help="batches kept for the H2D timing")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", help="append JSON lines here")
    parser.add_argument("--smoke", action="store_true", help="tiny, on the CPU: does it run?")
    args = parser.parse_args()
    if args.smoke:
        args.batch_size, args.workers, args.batches, args.hold, args.reps = 4, 1, 3, 2, 1
    device = pick_device(args.smoke)
    torch.set_num_threads(1)
    emit({"benchmark": "gpu_h2d", "machine": machine(), "args": vars(args)}, args.out)
    names = ["bare", "conveyor", "conveyor-copy", "torch"]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for rep in range(args.reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            result = run_bare(args, device) if name == "bare" else run_loader(name, args, device)
            runs[name].append(result)
            emit({"config": name, "rep": rep, **result}, args.out)
    summary = {name: {key: median([r[key] for r in rows if r.get(key) is not None])
                      for key in rows[0] if key != "pinned"}
               for name, rows in runs.items()}  # fmt: skip
    bare = summary["bare"]["h2d_gbps"]
    torch_cpu = summary["torch"].get("pin_cpu_s_per_gb")
    for name in names[1:]:
        row = summary[name]
        row["h2d_vs_bare"] = row["h2d_gbps"] / bare
        if torch_cpu and row.get("pin_cpu_s_per_gb") is not None:
            row["pin_cpu_vs_torch"] = row["pin_cpu_s_per_gb"] / torch_cpu
    emit({"summary": summary, "load_after": os.getloadavg()}, args.out)


if __name__ == "__main__":
    main()
