"""Crop boxes in original-image coordinates: RandomResizedCrop's draw and the eval geometry.

`random_resized_crop_box` is torchvision's ``RandomResizedCrop.get_params`` algorithm,
written from its documentation and observable behaviour: up to ten tries of an area
fraction drawn uniformly from ``scale`` and an aspect ratio drawn log-uniformly from
``ratio``, each try keeping the box if it fits, then a centred box of the whole image
clamped to ``ratio``. It makes the same torch calls in the same order (float32 draws, the
same ``round``), so with the same generator state it returns the same boxes as torchvision;
it needs only the image's size, which is what lets a decoder plan from the header alone.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

__all__ = ["CropBox", "ResizedCenter", "random_resized_crop_box", "resized_center_crop"]


class CropBox(NamedTuple):
    """``top, left, height, width`` in pixels of the image as stored (torchvision's order)."""

    top: int
    left: int
    height: int
    width: int


class ResizedCenter(NamedTuple):
    """The eval geometry: the whole image resized to ``resized`` (height, width), then the
    ``crop`` box of that resized image kept."""

    resized: tuple[int, int]
    crop: CropBox


@functools.lru_cache(maxsize=64)
def _log_ratio(low: float, high: float) -> tuple[float, float]:
    """``log(ratio)`` rounded through float32, as a float32 tensor hands it to ``uniform_``."""
    logs = torch.log(torch.tensor([low, high]))
    return float(logs[0]), float(logs[1])


def random_resized_crop_box(
    height: int,
    width: int,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
    generator: torch.Generator | None = None,
) -> CropBox:
    """RandomResizedCrop's box for a ``height`` x ``width`` image, drawn from ``generator``
    (None: torch's default generator, as torchvision draws)."""
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    area = height * width
    low, high = _log_ratio(float(ratio[0]), float(ratio[1]))
    draw = torch.empty(1)  # one float32 scalar, refilled: the draws of torch.empty(1).uniform_
    for _ in range(10):
        fraction = draw.uniform_(scale[0], scale[1], generator=generator).item()
        aspect = draw.uniform_(low, high, generator=generator).exp_().item()
        target = area * fraction
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, size=(1,), generator=generator).item())
            left = int(torch.randint(0, width - w + 1, size=(1,), generator=generator).item())
            return CropBox(top, left, h, w)
    return _fallback_box(height, width, ratio)


def _fallback_box(height: int, width: int, ratio: Sequence[float]) -> CropBox:
    """The centred box after ten misses: the whole image, clamped to the ratio range."""
    in_ratio = width / height
    if in_ratio < min(ratio):
        w = width
        h = round(w / min(ratio))
    elif in_ratio > max(ratio):
        h = height
        w = round(h * max(ratio))
    else:
        w, h = width, height
    return CropBox((height - h) // 2, (width - w) // 2, h, w)


def resized_center_crop(
    height: int, width: int, size: tuple[int, int], resize_to: int
) -> ResizedCenter:
    """torchvision's ``Resize(resize_to)`` (shorter side) then ``CenterCrop(size)``.

    The longer side becomes ``int(resize_to * long / short)``, as torchvision computes it;
    the crop's corner is ``round((resized - size) / 2)`` on each axis.
    """
    if height <= width:
        new_h, new_w = resize_to, int(resize_to * width / height)
    else:
        new_h, new_w = int(resize_to * height / width), resize_to
    crop_h, crop_w = size
    if crop_h > new_h or crop_w > new_w:
        raise ValueError(
            f"center crop {crop_h}x{crop_w} is larger than the resized image {new_h}x{new_w}"
        )
    top = round((new_h - crop_h) / 2.0)
    left = round((new_w - crop_w) / 2.0)
    return ResizedCenter((new_h, new_w), CropBox(top, left, crop_h, crop_w))
