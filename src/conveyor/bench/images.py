"""S3: JPEG decode + random crop 224, img/s, over JPEGs generated into a temporary directory.

Needs Pillow (``pip install conveyor[image]``). The images are 256x256 smooth colour fields
with noise, so they compress like photos (about 20 KB at quality 90).
"""

from __future__ import annotations

import functools
import io
import os
import random
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from conveyor.bench.harness import BenchSettings, Comparison, compare, loader_class

__all__ = ["JpegFiles", "run_s3", "write_jpegs"]

S3_BATCH = 64
CROP = 224
SIDE = 256


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as error:
        raise RuntimeError("S3 needs Pillow: pip install conveyor[image]") from error
    return Image


def write_jpegs(directory: str, count: int, seed: int = 0) -> list[str]:
    """Write ``count`` JPEGs into ``directory``; returns their paths in order."""
    image_module = _pillow()
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        low = image_module.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8))
        smooth = np.asarray(low.resize((SIDE, SIDE), image_module.Resampling.BICUBIC))
        noisy = smooth.astype(np.int16) + rng.integers(-12, 12, smooth.shape, dtype=np.int16)
        path = os.path.join(directory, f"{i:06d}.jpg")
        image_module.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(path, quality=90)
        paths.append(path)
    return paths


class JpegFiles:
    """Map-style: item i is a random 224 crop of file ``i % len(files)`` as CHW uint8, label."""

    def __init__(self, files: list[str], length: int) -> None:
        self.files = files
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[np.ndarray[Any, Any], int]:
        path = self.files[index % len(self.files)]
        with open(path, "rb") as handle:
            image = _pillow().open(io.BytesIO(handle.read())).convert("RGB")
        x = random.randint(0, image.width - CROP)
        y = random.randint(0, image.height - CROP)
        hwc = np.asarray(image.crop((x, y, x + CROP, y + CROP)))
        return np.ascontiguousarray(hwc.transpose(2, 0, 1)), index % 1000


def _decode_img_s(loader: str, dataset: JpegFiles, workers: int) -> float:
    """Images per second after the first batch, over one epoch."""
    start = 0.0
    counted = 0
    batches = loader_class(loader)(dataset, batch_size=S3_BATCH, num_workers=workers)
    for index, (images, _) in enumerate(batches):
        if tuple(images.shape[1:]) != (3, CROP, CROP):
            raise RuntimeError(f"S3: unexpected batch shape {tuple(images.shape)}")
        if index == 0:
            start = time.perf_counter()
        else:
            counted += len(images)
    return counted / (time.perf_counter() - start)


def run_s3(settings: BenchSettings) -> Iterator[Comparison]:
    """S3: decode + random crop 224 of generated JPEGs, batch 64, img/s after the first batch."""
    files, passes = (192, 2) if settings.quick else (512, 3)
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-s3-") as directory:
        dataset = JpegFiles(write_jpegs(directory, files), files * passes)
        for workers in settings.num_workers:
            yield compare(
                f"S3 jpeg bs64 nw{workers}",
                "img/s",
                functools.partial(_decode_img_s, dataset=dataset, workers=workers),
                settings.reps,
                higher_is_better=True,
                params={"scenario_id": "s3", "num_workers": workers, "batch_size": S3_BATCH},
            )
