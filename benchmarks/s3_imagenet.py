#!/usr/bin/env python
"""S3 at ImageNet size: JPEG decode + RandomResizedCrop(224) + flip, batch 64, 2 workers.

~500x375 photographic JPEGs at quality 90 (smooth gradients, shapes, 1/f texture and mild
noise; ~110 KB each) in tar shards and as files. Pipelines, run in interleaved repetitions
(the order rotates every rep), medians reported:

  conveyor-fast   TarShards(decode=RandomResizedCropDecoder(224).registry()): the crop is
                  planned from the header, decoded at the scale the box allows
  conveyor-full   the same pipeline and boxes, fast=False: Pillow decodes the whole image,
                  then the same crop, resize, flip
  conveyor-pil    TarShards + a Pillow transform (what torchvision's RandomResizedCrop does
                  on a PIL image: crop, resize BILINEAR, flip, to CHW uint8)
  torch-pil       torch.utils.data.DataLoader over the files, the same Pillow transform
  wds-pil         WebDataset over the shards + torch DataLoader, the same Pillow transform
  tdl-pil         torchdata StatefulDataLoader over the files, the same Pillow transform
  tdn-thread-pil  torchdata.nodes ParallelMapper(method="thread"), the same Pillow transform
  torch-simplejpeg  torch DataLoader, simplejpeg full decode + torch crop/resize/flip
  torch-spdl      torch DataLoader, SPDL's image decoding (FFmpeg) with crop/scale/hflip
                  filters (only where spdl and FFmpeg's libraries load)

torchvision is not used: PyPI's torchvision does not load beside torch 2.13.0 CPU here, so
the Pillow transform above is written out (its box is torchvision's algorithm,
`conveyor.vision.random_resized_crop_box`, from torch's default generator as torchvision
draws). The robust column is CPU seconds per 1,000 images over the whole process tree; "per
core" img/s is 1000 / that. Also reported: the one-core decode loops, the PSNR of
conveyor-fast's output against the Pillow reference at the same boxes, and which way the
fast decoder sent the images.

    python benchmarks/s3_imagenet.py [--reps 3] [--size 224] [--image-size 500x375]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import numpy as np
import psutil
import torch
import torch.nn.functional as F
import torch.utils.data as torch_data
from PIL import Image, ImageDraw, ImageFilter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conveyor import DataLoader
from conveyor.datapipes.iter.shards import TarShards
from conveyor.formats import ShardWriter
from conveyor.vision import RandomResizedCropDecoder, random_resized_crop_box
from s3_decode import tree_cpu_s

DATA_DIR = os.path.join(os.environ.get("BENCH_DATA_DIR", "/tmp/conveyor-bench-data"), "s3_imagenet")
SIZE = 224


# ----------------------------------------------------------------------------- the data


def _field(rng: np.random.Generator, h: int, w: int, cells: tuple[int, int]) -> Any:
    low = rng.normal(0, 1, (max(cells[0], 2), max(cells[1], 2))).astype(np.float32)
    return np.asarray(Image.fromarray(low, mode="F").resize((w, h), Image.Resampling.BICUBIC))


def _shapes(rng: np.random.Generator, draw: Any, w: int, h: int, count: int, size: int) -> None:
    for _ in range(count):
        x0, y0 = rng.uniform(-size / 2, w), rng.uniform(-size / 2, h)
        x1, y1 = x0 + rng.uniform(size / 4, size), y0 + rng.uniform(size / 4, size)
        colour = tuple(int(v) for v in rng.uniform(0, 255, 3))
        kind = rng.random()
        if kind < 0.4:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        elif kind < 0.8:
            corners = int(rng.integers(3, 7))
            points = [
                (float(rng.uniform(x0, x1)), float(rng.uniform(y0, y1))) for _ in range(corners)
            ]
            draw.polygon(points, fill=colour)
        else:
            draw.line((x0, y0, x1, y1), fill=colour, width=int(rng.integers(1, 5)))


def make_photo(rng: np.random.Generator, w: int = 500, h: int = 375, quality: int = 90) -> bytes:
    """A photograph-like JPEG: sky-to-ground gradient, large soft shapes, many small sharp
    ones, 1/f texture over part of the frame, mild sensor noise (~110 KB at 500x375 q90)."""
    rows = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    top, bottom = rng.uniform(40, 230, 3), rng.uniform(20, 200, 3)
    pixels = top * (1 - rows) + bottom * rows + np.zeros((h, w, 3), np.float32)
    for channel in range(3):
        pixels[..., channel] += _field(rng, h, w, (4, 5)) * 25
    canvas = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    _shapes(rng, ImageDraw.Draw(canvas), w, h, int(rng.integers(4, 9)), 250)
    canvas = canvas.filter(ImageFilter.GaussianBlur(1.5))
    _shapes(rng, ImageDraw.Draw(canvas), w, h, 200, 40)
    canvas = canvas.filter(ImageFilter.GaussianBlur(0.6))
    pixels = np.asarray(canvas).astype(np.float32)
    mask = (_field(rng, h, w, (3, 4)) > 0).astype(np.float32)[..., None]
    octaves = ((1.4, 0.8), (2, 1.0), (4, 0.8), (10, 0.7))
    texture = sum(_field(rng, h, w, (int(h / d), int(w / d))) * 45 * a for d, a in octaves)
    pixels += np.asarray(texture)[..., None] * (0.3 + 0.7 * mask)
    pixels += rng.normal(0, 5, pixels.shape)
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def build_data(n: int, shards: int, width: int, height: int) -> dict[str, Any]:
    """Files and shards in DATA_DIR (reused when the manifest matches)."""
    root = DATA_DIR if (width, height) == (500, 375) else f"{DATA_DIR}-{width}x{height}"
    manifest_path = os.path.join(root, f"manifest-{n}-{shards}.json")
    if os.path.exists(manifest_path):
        with open(manifest_path) as handle:
            manifest: dict[str, Any] = json.load(handle)
        return manifest
    rng = np.random.default_rng(2026)
    os.makedirs(os.path.join(root, "files"), exist_ok=True)
    files, labels, sizes = [], [], []
    pattern = os.path.join(root, f"shards-{n}", "shard-%05d.tar")
    with ShardWriter(pattern, max_count=-(-n // shards)) as writer:
        for i in range(n):
            data, label = make_photo(rng, width, height), int(rng.integers(0, 1000))
            path = os.path.join(root, "files", f"{i:06d}.jpg")
            with open(path, "wb") as handle:
                handle.write(data)
            files.append(path)
            labels.append(label)
            sizes.append(len(data))
            writer.write({"__key__": f"{i:06d}", "jpg": data, "cls": label})
    manifest = {"files": files, "labels": labels, "shards": writer.shards, "bytes": sizes}
    with open(manifest_path, "w") as handle:
        json.dump(manifest, handle)
    return manifest


# ----------------------------------------------------------------------------- transforms


def pil_random_resized_crop(data: bytes, generator: torch.Generator | None = None) -> Any:
    """torchvision's RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor on a PIL
    image, written out: Pillow decode, crop, resize BILINEAR, flip; CHW uint8 array."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    top, left, h, w = random_resized_crop_box(image.height, image.width, generator=generator)
    image = image.crop((left, top, left + w, top + h)).resize(
        (SIZE, SIZE), Image.Resampling.BILINEAR
    )
    if torch.rand(1, generator=generator).item() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.array(image).transpose(2, 0, 1)


def simplejpeg_random_resized_crop(data: bytes) -> Any:
    """simplejpeg full decode, then the box cropped and resized by torch, flipped."""
    import simplejpeg

    pixels = simplejpeg.decode_jpeg(data, colorspace="RGB")
    top, left, h, w = random_resized_crop_box(*pixels.shape[:2])
    crop = torch.from_numpy(pixels[top : top + h, left : left + w]).permute(2, 0, 1)[None]
    out = F.interpolate(crop, size=(SIZE, SIZE), mode="bilinear", antialias=True)[0]
    return out.flip(-1) if torch.rand(1).item() < 0.5 else out


def spdl_random_resized_crop(data: bytes) -> Any:
    """SPDL (FFmpeg) decode with crop, scale (bilinear) and hflip filters in one graph."""
    import spdl.io

    packets = spdl.io.demux_image(data)
    top, left, h, w = random_resized_crop_box(packets.height, packets.width)
    flip = ",hflip" if torch.rand(1).item() < 0.5 else ""
    graph = f"crop={w}:{h}:{left}:{top},scale={SIZE}:{SIZE}:flags=bilinear{flip},format=rgb24"
    frames = spdl.io.decode_packets(packets, filter_desc=graph)
    return spdl.io.to_numpy(spdl.io.convert_frames(frames)).transpose(2, 0, 1)


class FileSamples(torch_data.Dataset[tuple[Any, int]]):
    """Map-style: index -> (transform(file bytes), label)."""

    def __init__(self, files: list[str], labels: list[int], transform: Callable[..., Any]):
        self.files, self.labels, self.transform = files, labels, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        with open(self.files[index], "rb") as handle:
            return self.transform(handle.read()), self.labels[index]


class ImageAndLabel:
    """Picklable ``sample -> (sample["jpg"] transformed, int(sample["cls"]))``."""

    def __init__(self, transform: Callable[..., Any] | None = None) -> None:
        self.transform = transform

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        image = sample["jpg"] if self.transform is None else self.transform(sample["jpg"])
        return image, int(sample["cls"])


def wds_sample(sample: dict[str, Any]) -> tuple[Any, int]:
    return pil_random_resized_crop(sample["jpg"]), int(sample["cls"])


# ----------------------------------------------------------------------------- pipelines


def conveyor_decoder(spec: SimpleNamespace, fast: bool) -> Iterable[Any]:
    decoder = RandomResizedCropDecoder(SIZE, fast=fast)
    pipe = TarShards(list(spec.shards), decode=decoder.registry()).map(ImageAndLabel())
    generator = torch.Generator().manual_seed(spec.seed)  # the same boxes for fast and full
    return DataLoader(
        pipe, batch_size=spec.batch_size, num_workers=spec.num_workers, generator=generator
    )


def conveyor_pil(spec: SimpleNamespace) -> Iterable[Any]:
    pipe = TarShards(list(spec.shards), decode=None).map(ImageAndLabel(pil_random_resized_crop))
    return DataLoader(pipe, batch_size=spec.batch_size, num_workers=spec.num_workers)


def torch_files(spec: SimpleNamespace, transform: Callable[..., Any]) -> Iterable[Any]:
    return torch_data.DataLoader(
        FileSamples(spec.files, spec.labels, transform),
        batch_size=spec.batch_size,
        shuffle=True,
        num_workers=spec.num_workers,
        generator=torch.Generator().manual_seed(spec.seed),
    )


def torchdata_files(spec: SimpleNamespace) -> Iterable[Any]:
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(
        FileSamples(spec.files, spec.labels, pil_random_resized_crop),
        batch_size=spec.batch_size,
        shuffle=True,
        num_workers=spec.num_workers,
        generator=torch.Generator().manual_seed(spec.seed),
    )


def wds_shards(spec: SimpleNamespace) -> Iterable[Any]:
    import webdataset as wds

    dataset = (
        wds.WebDataset(list(spec.shards), shardshuffle=False, empty_check=False)
        .map(wds_sample)
        .batched(spec.batch_size, partial=True)
    )
    return torch_data.DataLoader(dataset, batch_size=None, num_workers=spec.num_workers)


def tdn_thread(spec: SimpleNamespace) -> Iterable[Any]:
    from torchdata.nodes import Batcher, Loader, Mapper, ParallelMapper, SamplerWrapper

    dataset = FileSamples(spec.files, spec.labels, pil_random_resized_crop)
    sampler = torch_data.RandomSampler(dataset, generator=torch.Generator().manual_seed(spec.seed))
    node: Any = SamplerWrapper(sampler)
    node = ParallelMapper(
        node, map_fn=dataset.__getitem__, num_workers=spec.num_workers, method="thread"
    )
    node = Batcher(node, batch_size=spec.batch_size, drop_last=False)
    node = Mapper(node, torch_data.default_collate)
    return Loader(node)


def optional_pipelines() -> dict[str, Callable[[SimpleNamespace], Iterable[Any]]]:
    found: dict[str, Callable[[SimpleNamespace], Iterable[Any]]] = {}
    try:
        import simplejpeg  # noqa: F401

        found["torch-simplejpeg"] = lambda s: torch_files(s, simplejpeg_random_resized_crop)
    except ImportError:
        pass
    try:  # spdl imports without FFmpeg; its first decode tells
        import spdl.io

        spdl.io.demux_image(make_photo(np.random.default_rng(0), 64, 48))
        found["torch-spdl"] = lambda s: torch_files(s, spdl_random_resized_crop)
    except Exception:
        pass
    return found


PIPELINES: dict[str, Callable[[SimpleNamespace], Iterable[Any]]] = {
    "conveyor-fast": lambda s: conveyor_decoder(s, True),
    "conveyor-full": lambda s: conveyor_decoder(s, False),
    "conveyor-pil": conveyor_pil,
    "torch-pil": lambda s: torch_files(s, pil_random_resized_crop),
    "wds-pil": wds_shards,
    "tdl-pil": torchdata_files,
    "tdn-thread-pil": tdn_thread,
}
OURS = ("conveyor-fast", "conveyor-full", "conveyor-pil")


def run_once(
    build: Callable[[SimpleNamespace], Iterable[Any]], spec: SimpleNamespace, warm: int
) -> dict[str, float]:
    """One pipeline run: steady img/s and CPU s per 1k images after ``warm`` batches."""
    start = time.perf_counter()
    iterator = iter(build(spec))
    seen, first, marks = 0, 0.0, {}
    processes: list[Any] = []
    for batches, (images, _) in enumerate(iterator, start=1):
        if batches == 1:
            first = time.perf_counter() - start
        assert tuple(images.shape[1:]) == (3, SIZE, SIZE) and images.dtype == torch.uint8
        seen += len(images)
        if batches == warm:
            me = psutil.Process()
            processes = [me, *me.children(recursive=True)]
            marks["warm"] = (time.perf_counter(), seen, tree_cpu_s(processes))
        elif batches > warm and len(images) == spec.batch_size:
            marks["end"] = (time.perf_counter(), seen, tree_cpu_s(processes))
    del iterator
    if seen != spec.n or "end" not in marks:
        raise RuntimeError(f"delivered {seen} of {spec.n} samples, or no steady window")
    (t0, n0, c0), (t1, n1, c1) = marks["warm"], marks["end"]
    return {
        "img_s": (n1 - n0) / (t1 - t0),
        "first_batch_s": first,
        "cpu_s_per_kimg": 1000 * (c1 - c0) / (n1 - n0),
    }


# ----------------------------------------------------------------------------- one core


def one_core_loops(files: list[str], images: int) -> dict[str, float]:
    """CPU ms per image of each transform alone, in this process (no loader)."""
    blobs = []
    for path in files[:images]:
        with open(path, "rb") as handle:
            blobs.append(handle.read())
    loops: dict[str, Callable[[bytes], Any]] = {
        "fast decoder": RandomResizedCropDecoder(SIZE),
        "full decoder (fast=False)": RandomResizedCropDecoder(SIZE, fast=False),
        "Pillow transform": pil_random_resized_crop,
    }
    loops.update(
        {name: fn for name, fn in _optional_loops().items()}  # simplejpeg / spdl
    )
    result = {}
    for name, transform in loops.items():
        torch.manual_seed(0)
        start = time.process_time()
        for blob in blobs:
            transform(blob)
        result[name] = 1000 * (time.process_time() - start) / len(blobs)
    return result


def _optional_loops() -> dict[str, Callable[[bytes], Any]]:
    names = {"torch-simplejpeg": "simplejpeg + torch resize", "torch-spdl": "SPDL (FFmpeg)"}
    transforms = {
        "torch-simplejpeg": simplejpeg_random_resized_crop,
        "torch-spdl": spdl_random_resized_crop,
    }
    return {names[key]: transforms[key] for key in optional_pipelines()}


# ----------------------------------------------------------------------------- quality


def psnr_at_same_boxes(files: list[str], draws: int, size: int) -> tuple[list[float], Counter[str]]:
    """PSNR of the fast decoder's output against the Pillow reference at the same box/flip."""
    decoder = RandomResizedCropDecoder(size, generator=torch.Generator().manual_seed(7))
    values = []
    for k in range(draws):
        with open(files[k % len(files)], "rb") as handle:
            data = handle.read()
        source = decoder._open(data)
        box, flip = decoder.draw(*source.shown_size)
        fast = decoder.render(source, box, flip).permute(1, 2, 0).numpy().astype(np.float64)
        reference = Image.open(io.BytesIO(data)).convert("RGB")
        reference = reference.crop((box.left, box.top, box.left + box.width, box.top + box.height))
        reference = reference.resize((size, size), Image.Resampling.BILINEAR)
        if flip:
            reference = reference.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        error = np.mean((fast - np.asarray(reference).astype(np.float64)) ** 2)
        values.append(99.0 if error == 0 else 10 * np.log10(255.0**2 / error))
    return values, decoder.paths


# ----------------------------------------------------------------------------- report


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _paired(a: list[dict[str, float]], b: list[dict[str, float]]) -> float:
    """Median over reps of b's CPU per image / a's: how many times a's img/s per core (NaN
    where no CPU time was measured: runs too short for the clock's ticks)."""
    ratios = [
        rb["cpu_s_per_kimg"] / ra["cpu_s_per_kimg"]
        for ra, rb in zip(a, b, strict=True)
        if ra["cpu_s_per_kimg"] > 0
    ]
    return statistics.median(ratios) if ratios else float("nan")


def markdown(
    results: dict[str, list[dict[str, float]]],
    loops: dict[str, float],
    quality: dict[int, tuple[list[float], Counter[str]]],
    args: argparse.Namespace,
    sizes: list[int],
) -> str:
    peers = [name for name in results if name not in OURS]
    best = min(peers, key=lambda name: _median(results[name], "cpu_s_per_kimg"), default=None)
    full = results.get("conveyor-full")  # absent where --pipelines left it out: no column
    rows = [
        "| pipeline | img/s per core | CPU s / 1k img | img/s (wall) [min-max] | "
        "x conveyor-full per core (paired) | x best peer per core (paired) |",
        "|---|---|---|---|---|---|",
    ]
    for name, runs in sorted(results.items(), key=lambda kv: _median(kv[1], "cpu_s_per_kimg")):
        cpu = _median(runs, "cpu_s_per_kimg")
        ips = [run["img_s"] for run in runs]
        vs_full = f"{_paired(runs, full):.2f}x" if full else "-"
        vs_peer = f"{_paired(runs, results[best]):.2f}x" if best else "-"
        rows.append(
            f"| {name} | {1000 / cpu if cpu > 0 else float('nan'):,.0f} | {cpu:.3f} "
            f"| {statistics.median(ips):,.0f} [{min(ips):,.0f}-{max(ips):,.0f}] | {vs_full} "
            f"| {vs_peer} |"
        )
    loop_rows = ["| transform, one core, no loader | CPU ms / image |", "|---|---|"]
    loop_rows += [f"| {name} | {ms:.3f} |" for name, ms in loops.items()]
    quality_rows = [
        "| output | draws | PSNR min | p5 | median | p95 | decoded as |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, (values, paths) in quality.items():
        p5, p50, p95 = np.percentile(values, [5, 50, 95])
        how = ", ".join(f"{path} {count}" for path, count in paths.most_common())
        quality_rows.append(
            f"| {size}x{size} | {len(values)} | {min(values):.1f} | {p5:.1f} | {p50:.1f} | "
            f"{p95:.1f} | {how} |"
        )
    command = "python benchmarks/s3_imagenet.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v != ""
    )
    kb = statistics.mean(sizes) / 1000
    return "\n".join(
        [
            f"{args.images} photographic JPEGs of {args.image_size}, quality 90 (mean {kb:.0f} "
            f"KB), as files and as {args.shards} tar shards; RandomResizedCrop({SIZE}) + "
            f"horizontal flip to CHW uint8, batch {args.batch_size}, {args.num_workers} workers, "
            f"{args.images * args.passes} samples per run, {args.reps} interleaved reps, "
            "medians. CPU is the whole process tree in the steady window; img/s per core = "
            f"1000 / CPU s per 1k images. Best peer: {best}.",
            "",
            *rows,
            "",
            *loop_rows,
            "",
            "Quality: conveyor-fast against Pillow's full decode, crop, resize (BILINEAR) and "
            "flip at the same boxes:",
            "",
            *quality_rows,
            "",
            f"Command: `{command}`",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--warm-batches", type=int, default=4)
    parser.add_argument("--pipelines", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--psnr-draws", type=int, default=500)
    parser.add_argument("--size", type=int, default=224, help="RandomResizedCrop's output side")
    parser.add_argument("--image-size", default="500x375", help="WIDTHxHEIGHT of the JPEGs")
    args = parser.parse_args()
    global SIZE
    SIZE = args.size
    width, height = (int(v) for v in args.image_size.split("x"))
    torch.set_num_threads(1)
    pipelines = {**PIPELINES, **optional_pipelines()}
    if args.pipelines:
        pipelines = {name: pipelines[name] for name in args.pipelines.split(",")}
    data = build_data(args.images, args.shards, width, height)
    print(f"load average {os.getloadavg()}", flush=True)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in pipelines}
    names = list(pipelines)
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
            )
            result = run_once(pipelines[name], spec, args.warm_batches)
            results[name].append(result)
            print(json.dumps({"pipeline": name, "rep": rep, **result}), flush=True)
    loops = one_core_loops(data["files"], 200)
    print(json.dumps({"one_core_ms": loops}), flush=True)
    quality = {
        size: psnr_at_same_boxes(data["files"], args.psnr_draws, size)
        for size in sorted({SIZE, SIZE // 2}, reverse=True)
    }
    print(f"load average {os.getloadavg()}", flush=True)
    report = markdown(results, loops, quality, args, data["bytes"])
    print(report)  # docs/benchmarks.md's section is written by hand around these tables


if __name__ == "__main__":
    main()
