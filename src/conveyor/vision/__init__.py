"""Images decoded at the size training needs: crop-aware JPEG decoding.

`RandomResizedCropDecoder` and `CenterCropDecoder` turn encoded bytes into CHW tensors,
planning the crop from the JPEG header and decoding at the smallest IDCT scale (1/2, 1/4,
1/8) that the box allows; `random_resized_crop_box` is torchvision's box draw on a size.
`GpuCropDecoder` does the same work on a GPU: workers plan and group the encoded bytes
(`JpegPlanner`, `JpegBatch`), the main process decodes a batch at once (nvJPEG).
Guide: docs/guide/decode-at-size.md.
"""

from conveyor.vision.boxes import (
    CropBox,
    ResizedCenter,
    random_resized_crop_box,
    resized_center_crop,
)
from conveyor.vision.decoders import CenterCropDecoder, RandomResizedCropDecoder
from conveyor.vision.gpu_decode import GpuCropDecoder
from conveyor.vision.jpeg_batch import JpegBatch, JpegPlanner, PlannedJpeg

__all__ = [
    "CenterCropDecoder",
    "CropBox",
    "GpuCropDecoder",
    "JpegBatch",
    "JpegPlanner",
    "PlannedJpeg",
    "RandomResizedCropDecoder",
    "ResizedCenter",
    "random_resized_crop_box",
    "resized_center_crop",
]
