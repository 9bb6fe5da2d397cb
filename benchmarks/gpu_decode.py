#!/usr/bin/env python
"""Batched GPU JPEG decode + RandomResizedCrop(224): images/s and the CPU it costs.

A corpus of ``--images`` photographic JPEGs (``--image-size``, quality 90) of which
``--odd`` (default 1 %) are odd (CMYK, progressive, greyscale, 4:4:4, restart markers).
Measured, interleaved over ``--reps``:

  gpu-decode     GpuCropDecoder(RandomResizedCropDecoder(224), "cuda") on planned batches
                 of ``--batch-size`` (encoded bytes in pinned memory, as registered slabs
                 hold them): one thread in this process; busy cores = this process's CPU
                 seconds / wall seconds
  gpu-loader     the whole path: TarShards(decode=gpu.registry()) in ``--workers`` workers
                 (header, box, grouping), pin_memory=True, to_device, decode_batch; busy
                 cores over the process tree
  cpu-decode     RandomResizedCropDecoder(224) (fast path) in one loop: img/s of one core

Reported: img/s, busy cores, img/s per busy core, failures (images no decoder read) and the
fallbacks (``decoder.paths``). Target (issue 29): >= 10,000 img/s with <= 1 busy core for
decoding, 0 failures with 1 % odd JPEGs.

``--cpu-side`` measures, on any machine, what GPU decoding leaves to the workers: a loader
whose workers only plan (``gpu.registry()``: header, box, grouping; nothing decoded) against
the same loader decoding on the CPU (``RandomResizedCropDecoder(224).registry()``), both
with ``--workers`` workers, interleaved: img/s and CPU seconds per 1,000 images of the
process tree.

    python benchmarks/gpu_decode.py                    # on a GPU machine
    python benchmarks/gpu_decode.py --cpu-side         # the workers' share, on the CPU
    python benchmarks/gpu_decode.py --smoke            # the code paths on the CPU
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import conveyor
from conveyor.collate import default_collate
from conveyor.vision import GpuCropDecoder, JpegPlanner, RandomResizedCropDecoder
from gpu_common import TreeCpu, corpus, emit, machine, median, pick_device, rates, write_shards


def planned_batches(blobs: list[bytes], batch_size: int, pinned: bool) -> list[Any]:
    planner = JpegPlanner(RandomResizedCropDecoder(224, generator=torch.Generator().manual_seed(1)))
    batches = []
    for start in range(0, len(blobs), batch_size):
        jpegs = default_collate([planner(blob) for blob in blobs[start : start + batch_size]])
        if pinned:
            jpegs.data = jpegs.data.pin_memory()
        batches.append(jpegs)
    return batches


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_gpu_decode(batches: list[Any], device: torch.device, passes: int) -> dict[str, Any]:
    decoder = GpuCropDecoder(RandomResizedCropDecoder(224), device, on_error="skip")
    decoder.decode_batch(batches[0])  # nvJPEG's start-up
    decoder.paths.clear()
    sync(device)
    cpu = TreeCpu()
    cpu.start()
    start = time.perf_counter()
    images = 0
    for _ in range(passes):
        for jpegs in batches:
            images += decoder.decode_batch(jpegs).shape[0]
    sync(device)
    seconds = time.perf_counter() - start
    result = rates(images, seconds, cpu.seconds())
    return {**result, "failures": decoder.skipped, "paths": dict(decoder.paths)}


def run_gpu_loader(
    shards: list[str], args: argparse.Namespace, device: torch.device
) -> dict[str, Any]:
    decoder = GpuCropDecoder(RandomResizedCropDecoder(224), device, on_error="skip")
    loader = conveyor.DataLoader(
        conveyor.TarShards(shards * args.passes, decode=decoder.registry()),
        batch_size=args.batch_size, num_workers=args.workers, pin_memory=device.type == "cuda",
    )  # fmt: skip
    batches = iter(conveyor.to_device(loader, device, depth=2))
    decoder.decode_batch(next(batches))
    sync(device)
    cpu = TreeCpu()
    cpu.start()
    start = time.perf_counter()
    images = sum(decoder.decode_batch(batch)["jpg"].shape[0] for batch in batches)
    sync(device)
    seconds = time.perf_counter() - start
    return {**rates(images, seconds, cpu.seconds()), "failures": decoder.skipped, "images": images}


def run_cpu_decode(blobs: list[bytes], count: int) -> dict[str, Any]:
    op = RandomResizedCropDecoder(224)
    start = time.process_time()
    for blob in blobs[:count]:
        op(blob)
    return {"img_s_one_core": count / (time.process_time() - start)}


def run_worker_side(shards: list[str], args: argparse.Namespace, plan_only: bool) -> dict[str, Any]:
    """The workers' work alone: plan + group (GPU decoding) or decode + crop (CPU)."""
    op = RandomResizedCropDecoder(224)
    decode = GpuCropDecoder(op, "cpu").registry() if plan_only else op.registry()
    loader = conveyor.DataLoader(conveyor.TarShards(shards * args.passes, decode=decode),
                                 batch_size=args.batch_size, num_workers=args.workers)  # fmt: skip
    batches = iter(loader)
    next(batches)
    steady = args.images * args.passes // args.batch_size - 2 * args.workers - 1
    cpu = TreeCpu()  # read while the workers live: the window ends before the last batches
    cpu.start()
    start = time.perf_counter()
    images = sum(len(next(batches)["cls"]) for _ in range(steady))
    seconds, cpu_s = time.perf_counter() - start, cpu.seconds()
    del batches
    return {**rates(images, seconds, cpu_s), "cpu_s_per_kimg": 1000 * cpu_s / images}


def cpu_side(args: argparse.Namespace, shards: list[str]) -> None:
    runs: dict[str, list[dict[str, Any]]] = {"workers-plan": [], "workers-decode": []}
    for rep in range(args.reps):
        for name in list(runs) if rep % 2 == 0 else list(runs)[::-1]:
            result = run_worker_side(shards, args, plan_only=name == "workers-plan")
            runs[name].append(result)
            emit({"config": name, "rep": rep, **result}, args.out)
    summary = {name: {key: median([r[key] for r in rows]) for key in rows[0]}
               for name, rows in runs.items()}  # fmt: skip
    emit({"summary": summary, "load_after": os.getloadavg()}, args.out)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--images", type=int, default=4096)
    parser.add_argument("--image-size", default="500x375")
    parser.add_argument("--odd", type=float, default=0.01, help="fraction of odd JPEGs")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", help="append JSON lines here")
    parser.add_argument("--smoke", action="store_true", help="tiny, on the CPU: does it run?")
    parser.add_argument("--cpu-side", action="store_true", help="the workers' share only")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.image_size, args.batch_size, args.workers = 40, "96x72", 8, 1
        args.passes, args.reps, args.odd = 1, 1, 0.1
    device = pick_device(args.smoke or args.cpu_side)
    torch.set_num_threads(1)
    size = tuple(int(v) for v in args.image_size.split("x"))
    blobs = corpus(args.images, (size[0], size[1]), args.odd)
    root = Path(os.environ.get("BENCH_DATA_DIR", tempfile.gettempdir())) / "gpu_decode"
    shards = write_shards(root / f"{args.image_size}-{args.odd}", blobs, per_shard=256)
    if args.cpu_side:
        emit({"benchmark": "gpu_decode --cpu-side", "machine": machine(), "args": vars(args)},
             args.out)  # fmt: skip
        cpu_side(args, shards)
        return
    batches = planned_batches(blobs, args.batch_size, pinned=device.type == "cuda")
    emit({"benchmark": "gpu_decode", "machine": machine(), "args": vars(args)}, args.out)
    runs: dict[str, list[dict[str, Any]]] = {"gpu-decode": [], "gpu-loader": [], "cpu-decode": []}
    for rep in range(args.reps):
        for name in list(runs) if rep % 2 == 0 else list(runs)[::-1]:
            if name == "gpu-decode":
                result = run_gpu_decode(batches, device, args.passes)
            elif name == "gpu-loader":
                result = run_gpu_loader(shards, args, device)
            else:
                result = run_cpu_decode(blobs, min(len(blobs), 300))
            runs[name].append(result)
            emit({"config": name, "rep": rep, **result}, args.out)
    summary = {name: {key: median([r[key] for r in rows]) for key in rows[0]
                      if isinstance(rows[0][key], int | float)}
               for name, rows in runs.items()}  # fmt: skip
    emit({"summary": summary, "load_after": os.getloadavg()}, args.out)


if __name__ == "__main__":
    main()
