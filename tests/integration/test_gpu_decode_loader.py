"""GPU decoding's worker half with real worker processes and tar shards, on the CPU device.

Workers plan and group the encoded bytes (`GpuCropDecoder.registry()`), batches cross in
shared memory, the main process decodes (Pillow standing for nvJPEG): images, labels, keys
and order must equal the CPU decoder's in the workers for the same seed, odd images and
``on_error="skip"`` included. tests/gpu runs the same with nvJPEG.
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
from conveyor.formats import BadSampleWarning, ShardWriter
from conveyor.vision import GpuCropDecoder, JpegBatch, RandomResizedCropDecoder

ODD = {5: "progressive", 9: "cmyk", 14: "truncated"}


def jpeg(seed: int, kind: str = "") -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.normal(128, 30, (72, 96, 3)).clip(0, 255).astype(np.uint8)
    image = Image.fromarray(pixels)
    buffer = io.BytesIO()
    if kind == "cmyk":
        image = image.convert("CMYK")
    image.save(buffer, "JPEG", quality=90, progressive=kind == "progressive")
    data = buffer.getvalue()
    return data[: len(data) // 2] if kind == "truncated" else data


def write(root: Path, bad: dict[int, str]) -> list[str]:
    with ShardWriter(str(root / "part-%03d.tar"), max_count=6) as writer:
        for i in range(24):
            writer.write({"__key__": f"{i:06d}", "jpg": jpeg(i, bad.get(i, "")), "cls": i})
    return list(writer.shards)


def _loader(shards: list[str], decode: Any, **kw: Any) -> DataLoader[Any]:
    return DataLoader(
        TarShards(shards, decode=decode, **kw),
        batch_size=5,
        num_workers=2,
        generator=torch.Generator().manual_seed(11),
    )


def test_images_labels_and_order_equal_the_cpu_path(tmp_path: Path) -> None:
    bad = {i: kind for i, kind in ODD.items() if kind != "truncated"}
    shards = write(tmp_path, bad)
    op = RandomResizedCropDecoder(32, fast=False)
    expected = list(_loader(shards, op.registry()))
    gpu = GpuCropDecoder(RandomResizedCropDecoder(32, fast=False), "cpu")
    got = []
    for batch in to_device(_loader(shards, gpu.registry()), "cpu"):
        assert isinstance(batch["jpg"], JpegBatch)
        got.append(gpu.decode_batch(batch))
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        assert mine["__key__"] == theirs["__key__"]
        assert torch.equal(mine["cls"], theirs["cls"])
        assert torch.equal(mine["jpg"], theirs["jpg"])  # the same boxes, drawn in the workers
    assert gpu.paths == {
        "gpu": 22,
        "cpu: progressive JPEG": 1,
        "cpu: 4-component JPEG (CMYK/YCCK)": 1,
    }


def test_skipped_images_leave_with_their_labels_and_keys(tmp_path: Path) -> None:
    shards = write(tmp_path, ODD)
    op = RandomResizedCropDecoder(32, fast=False)
    gpu = GpuCropDecoder(op, "cpu", on_error="skip")
    labels, keys = [], []
    with pytest.warns(BadSampleWarning, match="'?000014"):
        for batch in _loader(shards, gpu.registry()):
            decoded = gpu.decode_batch(batch)
            assert decoded["jpg"].shape[0] == len(decoded["cls"]) == len(decoded["__key__"])
            labels += decoded["cls"].tolist()
            keys += decoded["__key__"]
    assert sorted(labels) == [i for i in range(24) if i != 14]
    assert keys == [f"{i:06d}" for i in labels] and gpu.skipped_keys == ["000014"]
