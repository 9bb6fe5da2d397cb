"""Images decoded at the size training needs: crop-aware JPEG decoding.

`RandomResizedCropDecoder` and `CenterCropDecoder` turn encoded bytes into CHW tensors,
planning the crop from the JPEG header and decoding at the smallest IDCT scale (1/2, 1/4,
1/8) that the box allows; `random_resized_crop_box` is torchvision's box draw on a size.
Guide: docs/guide/decode-at-size.md.
"""

from conveyor.vision.boxes import (
    CropBox,
    ResizedCenter,
    random_resized_crop_box,
    resized_center_crop,
)
from conveyor.vision.decoders import CenterCropDecoder, RandomResizedCropDecoder

__all__ = [
    "CenterCropDecoder",
    "CropBox",
    "RandomResizedCropDecoder",
    "ResizedCenter",
    "random_resized_crop_box",
    "resized_center_crop",
]
