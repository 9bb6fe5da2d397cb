"""GpuCropDecoder with nvJPEG: the CPU decoder's boxes, close pixels, odd images on the CPU.

Run on the device machine (scripts/gpu_check.sh); skipped without CUDA.
tests/unit/vision/test_gpu_decode.py checks the same logic with Pillow on the CPU device.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from conveyor import DataLoader, TarShards, to_device
from conveyor.collate import default_collate
from conveyor.formats import ShardWriter
from conveyor.vision import GpuCropDecoder, JpegPlanner, RandomResizedCropDecoder

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.filterwarnings("ignore:CUDA is initialised in this process:UserWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning:torchvision.*"),
]


def photo(seed: int, size: tuple[int, int] = (500, 375)) -> Image.Image:
    rng = np.random.default_rng(seed)
    width, height = size
    ramp = np.linspace(0, 200, width)[None, :, None] * rng.uniform(0.3, 1, 3)
    pixels = np.broadcast_to(ramp, (height, width, 3)) + rng.normal(0, 10, (height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def encode(image: Image.Image, **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90, **options)
    return buffer.getvalue()


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    error = float(((a.double().cpu() - b.double().cpu()) ** 2).mean())
    return 99.0 if error == 0 else 10 * float(np.log10(255.0**2 / error))


def _planned(blobs: list[bytes], op: RandomResizedCropDecoder, seed: int) -> Any:
    op.generator = torch.Generator().manual_seed(seed)
    planner = JpegPlanner(op)
    return default_collate([planner(blob) for blob in blobs])


def test_nvjpeg_output_is_close_to_the_cpu_decoder_at_the_same_boxes() -> None:
    blobs = [encode(photo(i)) for i in range(32)]
    blobs += [encode(photo(40), progressive=True), encode(photo(41).convert("CMYK"))]
    op = RandomResizedCropDecoder(224, fast=False)
    decoder = GpuCropDecoder(op, "cuda")
    images = decoder(_planned(blobs, op, seed=5))
    assert images.is_cuda and images.shape == (34, 3, 224, 224)
    reference = RandomResizedCropDecoder(
        224, fast=False, generator=torch.Generator().manual_seed(5)
    )
    expected = [reference(blob) for blob in blobs]
    values = [psnr(image, want) for image, want in zip(images, expected, strict=True)]
    assert np.median(values[:32]) >= 35 and min(values[:32]) >= 30, values
    assert values[32:] == [99.0, 99.0]  # decoded by the CPU decoder itself
    assert decoder.paths["gpu"] == 32 and sum(decoder.paths.values()) == 34


def test_a_loader_with_gpu_decode_gives_the_cpu_paths_labels_and_order(tmp_path: Path) -> None:
    with ShardWriter(str(tmp_path / "part-%03d.tar"), max_count=16) as writer:
        for i in range(64):
            writer.write({"__key__": f"{i:06d}", "jpg": encode(photo(i, (160, 120))), "cls": i})
    shards = list(writer.shards)

    def loader(decode: Any) -> DataLoader[Any]:
        return DataLoader(TarShards(shards, decode=decode), batch_size=16, num_workers=2,
                          pin_memory=True, generator=torch.Generator().manual_seed(9))  # fmt: skip

    cpu = list(loader(RandomResizedCropDecoder(64, fast=False).registry()))
    gpu = GpuCropDecoder(RandomResizedCropDecoder(64, fast=False), "cuda")
    got = [gpu.decode_batch(batch) for batch in to_device(loader(gpu.registry()), "cuda")]
    assert [b["__key__"] for b in got] == [b["__key__"] for b in cpu]
    assert all(torch.equal(g["cls"].cpu(), c["cls"]) for g, c in zip(got, cpu, strict=True))
    values = [
        psnr(a, b)
        for g, c in zip(got, cpu, strict=True)
        for a, b in zip(g["jpg"], c["jpg"], strict=True)
    ]
    assert np.median(values) >= 35, values


def test_a_corrupt_image_is_refused_or_decoded_never_a_crash() -> None:
    good = [encode(photo(i, (160, 120))) for i in range(8)]
    scan = good[3].index(b"\xff\xda") + 30
    good[3] = good[3][:scan] + bytes(64) + b"\xff\xd9"  # a broken scan that ends properly
    op = RandomResizedCropDecoder(64, fast=False)
    decoder = GpuCropDecoder(op, "cuda", on_error="skip")
    batch = {"jpg": _planned(good, op, seed=1), "cls": torch.arange(8)}
    out = decoder.decode_batch(batch)
    assert out["jpg"].shape[0] == len(out["cls"]) >= 7
    assert sum(decoder.paths.values()) + decoder.skipped == 8
