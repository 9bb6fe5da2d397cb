#!/usr/bin/env python
"""S3 decode: JPEG decode + random crop 224 + CHW uint8, batch 64, 2 workers.

~2,000 JPEGs (256x256, quality 90) stored as files and as 10 tar shards. Pipelines, run in
interleaved repetitions (the order rotates every rep), medians reported:

  conveyor-tar    conveyor.bench_adapters.s3_tar: TarShards streamed in the workers
  conveyor-files  conveyor.bench_adapters.s3_files: map-style DataPipe over the files
  torch-files     torch.utils.data.DataLoader over a map-style Dataset of the files
  wds             webdataset.WebDataset over the shards (only if webdataset imports)

Each run streams ``images * passes`` samples. Reported per pipeline: steady img/s (after
``--warm-batches``), first-batch seconds, and CPU seconds per 1,000 images summed over the
whole process tree (the robust column on a shared machine).

    python benchmarks/s3_decode.py [--reps 3] [--markdown docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import time
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import numpy as np
import psutil
import torch
import torch.utils.data as torch_data
from PIL import Image

from conveyor import bench_adapters
from conveyor.formats import ShardWriter

DATA_DIR = os.path.join(os.environ.get("BENCH_DATA_DIR", "/tmp/conveyor-bench-data"), "s3_decode")


def make_jpeg(rng: np.random.Generator, side: int = 256) -> bytes:
    """Smooth random colours plus noise: compresses like a photo (~20 KB at quality 90)."""
    low = Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8))
    pixels = np.asarray(low.resize((side, side), Image.Resampling.BICUBIC)).astype(np.int16)
    pixels += rng.integers(-12, 12, pixels.shape, dtype=np.int16)
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def build_data(n: int, shards: int) -> dict[str, Any]:
    """Files and shards in DATA_DIR (reused when the manifest matches)."""
    manifest_path = os.path.join(DATA_DIR, f"manifest-{n}-{shards}.json")
    if os.path.exists(manifest_path):
        with open(manifest_path) as handle:
            manifest: dict[str, Any] = json.load(handle)
        return manifest
    rng = np.random.default_rng(1234)
    os.makedirs(os.path.join(DATA_DIR, "files"), exist_ok=True)
    files, labels = [], []
    pattern = os.path.join(DATA_DIR, f"shards-{n}", "shard-%05d.tar")
    with ShardWriter(pattern, max_count=-(-n // shards)) as writer:
        for i in range(n):
            data, label = make_jpeg(rng), int(rng.integers(0, 1000))
            path = os.path.join(DATA_DIR, "files", f"{i:06d}.jpg")
            with open(path, "wb") as handle:
                handle.write(data)
            files.append(path)
            labels.append(label)
            writer.write({"__key__": f"{i:06d}", "jpg": data, "cls": label})
    manifest = {"files": files, "labels": labels, "shards": writer.shards}
    with open(manifest_path, "w") as handle:
        json.dump(manifest, handle)
    return manifest


def decode_crop(data: bytes, crop: int = 224) -> np.ndarray[Any, Any]:
    """JPEG bytes -> random 224 crop -> CHW uint8 (the S3 transform)."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    x = random.randint(0, image.width - crop)
    y = random.randint(0, image.height - crop)
    hwc = np.asarray(image.crop((x, y, x + crop, y + crop)))
    return np.ascontiguousarray(hwc.transpose(2, 0, 1))


class LoadDecode:
    """Picklable index -> (CHW uint8 array, label) over the files."""

    def __init__(self, files: list[str], labels: list[int]) -> None:
        self.files, self.labels = files, labels

    def __call__(self, index: int) -> tuple[np.ndarray[Any, Any], int]:
        index %= len(self.files)
        with open(self.files[index], "rb") as handle:
            return decode_crop(handle.read()), self.labels[index]


class FileDataset(torch_data.Dataset[tuple[np.ndarray[Any, Any], int]]):
    def __init__(self, load: LoadDecode, n: int) -> None:
        self.load, self.n = load, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[np.ndarray[Any, Any], int]:
        return self.load(index)


def wds_sample(sample: dict[str, Any]) -> tuple[np.ndarray[Any, Any], int]:
    return decode_crop(sample["jpg"]), int(sample["cls"])


def torch_files(spec: SimpleNamespace) -> Iterable[Any]:
    generator = torch.Generator().manual_seed(spec.seed)
    return torch_data.DataLoader(
        FileDataset(spec.load_decode, spec.n),
        batch_size=spec.batch_size,
        shuffle=True,
        num_workers=spec.num_workers,
        generator=generator,
    )


def wds_shards(spec: SimpleNamespace) -> Iterable[Any]:
    import webdataset as wds

    dataset = (
        wds.WebDataset(spec.shards, shardshuffle=False, empty_check=False)
        .map(wds_sample)
        .batched(spec.batch_size, partial=True)
    )
    return torch_data.DataLoader(dataset, batch_size=None, num_workers=spec.num_workers)


FLOOR = "decode-loop"

PIPELINES: dict[str, Callable[[SimpleNamespace], Iterable[Any]]] = {
    "conveyor-tar": bench_adapters.s3_tar,
    "conveyor-files": bench_adapters.s3_files,
    "torch-files": torch_files,
}


def tree_cpu_s(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def run_once(
    build: Callable[[SimpleNamespace], Iterable[Any]], spec: Any, warm: int
) -> dict[str, float]:
    random.seed(spec.seed)
    start = time.perf_counter()
    iterator = iter(build(spec))
    seen = 0
    first = warm_t = warm_n = end_t = end_n = cpu_warm = cpu_end = 0.0
    processes: list[psutil.Process] = []
    for batches, (images, _) in enumerate(iterator, start=1):
        if batches == 1:
            first = time.perf_counter() - start
        assert tuple(images.shape[1:]) == (3, 224, 224) and images.dtype == torch.uint8
        seen += len(images)
        if batches == warm:
            me = psutil.Process()
            processes = [me, *me.children(recursive=True)]
            warm_t, warm_n, cpu_warm = time.perf_counter(), seen, tree_cpu_s(processes)
        elif batches > warm and len(images) == spec.batch_size:
            end_t, end_n, cpu_end = time.perf_counter(), seen, tree_cpu_s(processes)
    del iterator
    if seen != spec.n:
        raise RuntimeError(f"delivered {seen} samples, expected {spec.n}")
    if end_n <= warm_n:
        raise RuntimeError("no steady window: use more --images/--passes or fewer warm batches")
    return {
        "img_s": (end_n - warm_n) / (end_t - warm_t),
        "first_batch_s": first,
        "cpu_s_per_kimg": 1000 * (cpu_end - cpu_warm) / (end_n - warm_n),
    }


def decode_floor(spec: SimpleNamespace, images: int = 500) -> dict[str, float]:
    """The plain decode loop in this process: the CPU cost no loader can go below."""
    random.seed(spec.seed)
    cpu, start = time.process_time(), time.perf_counter()
    for index in range(images):
        spec.load_decode(index)
    seconds = time.perf_counter() - start
    return {
        "img_s": images / seconds,
        "first_batch_s": 0.0,
        "cpu_s_per_kimg": 1000 * (time.process_time() - cpu) / images,
    }


def replace_section(text: str, heading: str, body: str) -> str:
    """``text`` with the section under ``heading`` (up to the next ``## ``) replaced."""
    lines = text.splitlines()
    if heading not in lines:
        return text.rstrip() + f"\n\n{heading}\n\n{body.rstrip()}\n"
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), None)
    tail = lines[end:] if end is not None else []
    return "\n".join([*lines[:start], heading, "", body.rstrip(), "", *tail]).rstrip() + "\n"


def markdown(results: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> str:
    rows = [
        "| pipeline | img/s (median [min-max]) | CPU s / 1k img | first batch s |",
        "|---|---|---|---|",
    ]
    torch_ips = statistics.median(r["img_s"] for r in results["torch-files"])
    for name, runs in results.items():
        if name == FLOOR:
            continue
        ips = [r["img_s"] for r in runs]
        cpu = statistics.median(r["cpu_s_per_kimg"] for r in runs)
        first = statistics.median(r["first_batch_s"] for r in runs)
        rows.append(
            f"| {name} | {statistics.median(ips):,.0f} [{min(ips):,.0f}-{max(ips):,.0f}] "
            f"({statistics.median(ips) / torch_ips:.2f}x torch) | {cpu:.3f} | {first:.2f} |"
        )
    floor = statistics.median(r["cpu_s_per_kimg"] for r in results[FLOOR])
    floor_ips = statistics.median(r["img_s"] for r in results[FLOOR])
    rows.append(f"| decode loop, 1 core, no loader | {floor_ips:,.0f} | {floor:.3f} | - |")
    command = "python benchmarks/s3_decode.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "markdown"
    )
    return "\n".join(
        [
            f"{args.images} JPEGs of 256x256 (quality 90) as files and as {args.shards} tar "
            f"shards; decode + random crop 224 + CHW uint8, batch {args.batch_size}, "
            f"{args.num_workers} workers, {args.images * args.passes} samples per run, "
            f"{args.reps} interleaved reps, medians. CPU is the whole process tree in the "
            "steady window.",
            "",
            *rows,
            "",
            f"Command: `{command}`",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--warm-batches", type=int, default=6)
    parser.add_argument("--markdown", help="update the '## S3 decode' section of this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pipelines = dict(PIPELINES)
    try:
        import webdataset  # noqa: F401

        pipelines["wds"] = wds_shards
    except ImportError:
        pass
    data = build_data(args.images, args.shards)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in [*pipelines, FLOOR]}
    names = [*pipelines, FLOOR]
    for rep in range(args.reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order if rep % 2 == 0 else reversed(order):
            spec = SimpleNamespace(
                files=data["files"] * args.passes,
                labels=data["labels"] * args.passes,
                shards=data["shards"] * args.passes,
                n=args.images * args.passes,
                batch_size=args.batch_size,
                num_workers=args.num_workers,
                seed=1000 + rep,
                transform=decode_crop,
                load_decode=LoadDecode(data["files"], data["labels"]),
            )
            if name == FLOOR:
                result = decode_floor(spec)
            else:
                result = run_once(pipelines[name], spec, args.warm_batches)
            results[name].append(result)
            print(json.dumps({"pipeline": name, "rep": rep, **result}), flush=True)
    report = markdown(results, args)
    print(report)
    if args.markdown:
        text = "# Benchmarks\n"
        if os.path.exists(args.markdown):
            with open(args.markdown) as handle:
                text = handle.read()
        with open(args.markdown, "w") as handle:
            handle.write(replace_section(text, "## S3 decode", report))


if __name__ == "__main__":
    main()
