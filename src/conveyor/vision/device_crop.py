"""Crop, orient and resize decoded images where they are (a GPU, or the CPU in tests).

The same geometry as the CPU decoders' full-decode path (`conveyor.vision.pixels`), on CHW
tensors: the displayed box is mapped to the stored image (`stored_region`), cut out, turned
by its EXIF orientation, then resized with torch's antialiased bilinear filter. On the CPU a
uint8 image is resized by torch's uint8 kernel exactly as ``resize_chw`` does it; elsewhere
(CUDA has no uint8 antialiased kernel) in float32, rounded back to uint8.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from conveyor.vision.boxes import CropBox, resized_center_crop
from conveyor.vision.orientation import SWAPS_AXES, stored_region

__all__ = ["center_crop", "orient_chw", "random_resized_crop", "resize_uint8"]


def orient_chw(image: torch.Tensor, orientation: int) -> torch.Tensor:
    """``image`` (CHW) as displayed: Pillow's ``exif_transpose`` for ``orientation``."""
    if orientation == 2:
        return image.flip(-1)
    if orientation == 3:
        return image.flip(-2, -1)
    if orientation == 4:
        return image.flip(-2)
    if orientation not in SWAPS_AXES:
        return image
    swapped = image.transpose(-2, -1)
    if orientation == 6:
        return swapped.flip(-1)
    if orientation == 7:
        return swapped.flip(-2, -1)
    if orientation == 8:
        return swapped.flip(-2)
    return swapped  # 5


def resize_uint8(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """CHW uint8 → CHW uint8 of ``size`` (h, w), antialiased bilinear (torchvision's default)."""
    if tuple(image.shape[-2:]) == size:
        return image.contiguous()
    batch = image.unsqueeze(0)
    if image.device.type == "cpu":
        resized = F.interpolate(
            batch, size=size, mode="bilinear", antialias=True, align_corners=False
        )
        return resized[0]
    resized = F.interpolate(
        batch.float(), size=size, mode="bilinear", antialias=True, align_corners=False
    )
    return resized[0].round_().clamp_(0, 255).to(torch.uint8)


def random_resized_crop(
    image: torch.Tensor, box: CropBox, orientation: int, size: tuple[int, int]
) -> torch.Tensor:
    """The displayed ``box`` of a decoded, stored ``image`` (CHW uint8), resized to ``size``."""
    height, width = image.shape[-2:]
    corners = (box.left, box.top, box.left + box.width, box.top + box.height)
    x0, y0, x1, y1 = stored_region(orientation, corners, int(width), int(height))
    return resize_uint8(orient_chw(image[:, y0:y1, x0:x1], orientation), size)


def center_crop(
    image: torch.Tensor, orientation: int, size: tuple[int, int], resize_to: int
) -> torch.Tensor:
    """``Resize(resize_to)`` then ``CenterCrop(size)`` of a decoded, stored ``image``."""
    shown = orient_chw(image, orientation)
    height, width = shown.shape[-2:]
    plan = resized_center_crop(int(height), int(width), size, resize_to)
    resized = resize_uint8(shown, plan.resized)
    top, left, crop_h, crop_w = plan.crop
    return resized[:, top : top + crop_h, left : left + crop_w]
