"""Decode at training size inside real loaders: TarShards decoders, DataPipes, map-style.

Corrupt images inside shards are skipped and counted in the main process under
``on_error="skip"`` (and raise naming shard and key otherwise); in worker processes each
worker draws its boxes from its own generator, so a seeded loader gives the same boxes
on the fast path and the full decode.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from conveyor import DataLoader
from conveyor.datapipes.iter.shards import TarShards
from conveyor.datapipes.map import SequenceWrapper
from conveyor.formats import BadSampleWarning, SampleError, ShardWriter
from conveyor.formats.skips import drain_skips
from conveyor.vision import RandomResizedCropDecoder

BAD = {3: "truncated", 7: "garbage", 12: "header only"}


def jpeg(seed: int, size: tuple[int, int] = (96, 72)) -> bytes:
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 200, size[0])[None, :, None] + rng.uniform(0, 50, 3)
    pixels = np.broadcast_to(ramp, (size[1], size[0], 3)) + rng.normal(0, 4, (size[1], size[0], 3))
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def damaged(kind: str, data: bytes) -> bytes:
    if kind == "truncated":
        return data[: len(data) // 2]
    if kind == "garbage":
        return b"\x00garbage" * 20
    return data[: data.index(b"\xff\xda") + 4]  # the header, then nothing of the scan


def write(root: Path, samples: int = 16, per_shard: int = 4) -> list[str]:
    with ShardWriter(str(root / "part-%03d.tar"), max_count=per_shard) as writer:
        for i in range(samples):
            data = jpeg(i)
            if i in BAD:
                data = damaged(BAD[i], data)
            writer.write({"__key__": f"{i:06d}", "jpg": data, "cls": i})
    return list(writer.shards)


@pytest.fixture(autouse=True)
def _empty_sink() -> Iterator[None]:
    drain_skips()
    yield
    drain_skips()


class ImageAndLabel:
    def __call__(self, sample: dict[str, Any]) -> tuple[torch.Tensor, int]:
        return sample["jpg"], int(sample["cls"])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_corrupt_images_are_skipped_and_counted(tmp_path: Path, num_workers: int) -> None:
    shards = write(tmp_path)
    decoder = RandomResizedCropDecoder(32)
    pipe = TarShards(shards, decode=decoder.registry(), on_error="skip").map(ImageAndLabel())
    loader = DataLoader(pipe, batch_size=4, num_workers=num_workers)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        labels = sorted(int(label) for _, batch in loader for label in batch)
    assert labels == [i for i in range(16) if i not in BAD]
    assert loader.stats().skipped == len(BAD)
    message = " ".join(str(w.message) for w in caught if issubclass(w.category, BadSampleWarning))
    assert all(f"'{i:06d}'" in message for i in BAD), message


def test_a_corrupt_image_raises_naming_shard_and_key(tmp_path: Path) -> None:
    shards = write(tmp_path)
    pipe = TarShards(shards, decode=RandomResizedCropDecoder(32).registry())
    with pytest.raises(SampleError, match=r"cannot decode 'jpg'") as raised:
        list(DataLoader(pipe.map(ImageAndLabel()), batch_size=4))
    assert raised.value.key == "000003" and raised.value.url == shards[0]


def boxes_of(loader: DataLoader[Any]) -> list[torch.Tensor]:
    return [image for batch, _ in loader for image in batch]


class Files:
    """A map-style dataset calling the decoder in ``__getitem__``."""

    def __init__(self, blobs: list[bytes], decoder: RandomResizedCropDecoder) -> None:
        self.blobs, self.decoder = blobs, decoder

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.decoder(self.blobs[index]), index


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    error = float(((a.double() - b.double()) ** 2).mean())
    return 99.0 if error == 0 else 10 * float(np.log10(255.0**2 / error))


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_workers_draw_from_their_own_generator_the_same_boxes_fast_or_not(
    worker_type: str,
) -> None:
    blobs = [jpeg(i, (240, 180)) for i in range(12)]
    runs = {}
    for name, fast in (("fast", True), ("again", True), ("full", False)):
        dataset = Files(blobs, RandomResizedCropDecoder(48, fast=fast))
        loader = DataLoader(
            dataset,
            batch_size=3,
            num_workers=2,
            worker_type=worker_type,
            generator=torch.Generator().manual_seed(5),
        )
        runs[name] = boxes_of(loader)
    assert all(torch.equal(a, b) for a, b in zip(runs["fast"], runs["again"], strict=True))
    # the same boxes: full decode and fast path agree closely image by image
    assert min(psnr(a, b) for a, b in zip(runs["fast"], runs["full"], strict=True)) > 30
    # and the two workers did not draw the same boxes
    assert not torch.equal(runs["fast"][0], runs["fast"][3])


def test_as_a_datapipe_map_function() -> None:
    blobs = [jpeg(i) for i in range(6)]
    decoder = RandomResizedCropDecoder(24, generator=torch.Generator().manual_seed(0))
    images = list(SequenceWrapper(blobs).map(decoder))
    assert [tuple(image.shape) for image in images] == [(3, 24, 24)] * 6
    again = RandomResizedCropDecoder(24, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, again(b)) for a, b in zip(images, blobs, strict=True))


def test_a_corrupt_image_in_a_map_style_dataset_is_skipped_and_counted() -> None:
    blobs = [jpeg(i) for i in range(8)]
    blobs[5] = damaged("truncated", blobs[5])
    loader = DataLoader(
        Files(blobs, RandomResizedCropDecoder(24)), batch_size=4, num_workers=2, on_error="skip"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        indices = sorted(int(index) for _, batch in loader for index in batch)
    assert indices == [0, 1, 2, 3, 4, 6, 7] and loader.stats().skipped == 1
    # simplejpeg refuses the cut data, Pillow (the fallback) says why
    messages = [str(w.message) for w in caught if issubclass(w.category, BadSampleWarning)]
    assert len(messages) == 1 and "index 5: OSError: image file is truncated" in messages[0]
