"""The worker's half of GPU decoding: plan each image, group the encoded bytes of a batch.

`JpegPlanner` stands where a CPU decoder would (a `TarShards` decoder, a ``dp.map``
function, a call in ``__getitem__``): it reads the header, draws the crop box and flip from
the worker's generator exactly as `RandomResizedCropDecoder` does for the same image (so
both paths crop the same boxes), decides whether the GPU can decode the image, and keeps the
bytes. Collation (`collate_planned`, which `conveyor.default_collate` uses for `PlannedJpeg`)
puts a batch's bytes side by side in one uint8 tensor (inside the worker's shared-memory
slab), so the batch crosses to the main process as a handful of tensors, where
`conveyor.vision.gpu_decode.GpuCropDecoder` decodes it. No CUDA, no torchvision here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from conveyor.collate import CollateFnMap, get_output_allocator, register_conveyor_type
from conveyor.formats.decoders import IMAGE_EXTENSIONS, DecoderRegistry
from conveyor.vision.boxes import CropBox
from conveyor.vision.decoders import CenterCropDecoder, RandomResizedCropDecoder
from conveyor.vision.pixels import Source, open_source, read_bytes

__all__ = ["CropOp", "JpegBatch", "JpegPlanner", "PlannedJpeg", "collate_planned", "gpu_route"]

CropOp = RandomResizedCropDecoder | CenterCropDecoder
"""The CPU decoders whose work a `GpuCropDecoder` does on the GPU."""

_EOI = b"\xff\xd9"
_EOI_SEARCH_BYTES = 64  # an end-of-image marker may be followed by a little padding


def gpu_route(source: Source) -> str:
    """``""`` if a batched GPU decoder takes this image, else why it is decoded on the CPU."""
    header = source.header
    if header is None or source.slow is not None:
        return source.slow or "not a JPEG"
    if header.progressive:
        return "progressive JPEG"
    if _EOI not in source.data[-_EOI_SEARCH_BYTES:]:
        return "no end-of-image marker (truncated?)"
    return ""


@dataclass(frozen=True, slots=True)
class PlannedJpeg:
    """One image as a worker planned it: the bytes and everything drawn from its header."""

    data: bytes
    height: int  # stored (before the EXIF transpose)
    width: int
    orientation: int  # EXIF orientation to apply (1 unless exif_transpose)
    box: CropBox | None  # RandomResizedCrop's box in displayed coordinates (None: centre)
    flip: bool
    route: str  # "" for the GPU, else why the CPU decodes it


class JpegPlanner:
    """Plans images for a `GpuCropDecoder` in the workers. Picklable; imports no GPU code.

    Args:
        op: The CPU decoder whose boxes, flips, size and output format are reproduced.
    """

    def __init__(self, op: CropOp) -> None:
        self.op = op

    def __call__(self, data: Any) -> PlannedJpeg:
        raw = read_bytes(data)
        source = open_source(raw, self.op.exif_transpose)  # a bad header raises, as on the CPU
        box: CropBox | None = None
        flip = False
        if isinstance(self.op, RandomResizedCropDecoder):
            box, flip = self.op.draw(*source.shown_size)
        route = gpu_route(source)
        return PlannedJpeg(raw, source.height, source.width, source.orientation, box, flip, route)

    def registry(self, extensions: Iterable[str] = IMAGE_EXTENSIONS) -> DecoderRegistry:
        """A `DecoderRegistry` planning ``extensions`` with this planner (for `TarShards`)."""
        return DecoderRegistry(decoders=dict.fromkeys(extensions, self))

    def __repr__(self) -> str:
        return f"JpegPlanner({self.op!r})"


class JpegBatch:
    """A batch of planned images: encoded bytes side by side, and the plans as tensors.

    Encoded bytes stay on the host: ``to()`` and ``pin_memory()`` return the batch itself
    (decoding is what moves images to the device), so `conveyor.to_device` and
    ``pin_memory=True`` pass it through untouched.
    """

    __slots__ = ("boxes", "data", "flips", "offsets", "orientations", "routes", "sizes")

    def __init__(
        self,
        data: torch.Tensor,
        offsets: torch.Tensor,
        sizes: torch.Tensor,
        orientations: torch.Tensor,
        boxes: torch.Tensor,
        flips: torch.Tensor,
        routes: tuple[str, ...],
    ) -> None:
        self.data = data  # uint8 [total bytes]
        self.offsets = offsets  # int64 [n + 1]
        self.sizes = sizes  # int64 [n, 2]: stored (height, width)
        self.orientations = orientations  # int64 [n]
        self.boxes = boxes  # int64 [n, 4]: (top, left, height, width); -1 rows: centre crop
        self.flips = flips  # bool [n]
        self.routes = routes

    def __len__(self) -> int:
        return len(self.routes)

    def encoded(self, index: int) -> torch.Tensor:
        """Image ``index``'s bytes: a view, no copy."""
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        return self.data[start:end]

    def plan(self, index: int) -> PlannedJpeg:
        """Image ``index`` as its worker planned it (the bytes copied out)."""
        top, left, height, width = (int(v) for v in self.boxes[index])
        box = None if top < 0 else CropBox(top, left, height, width)
        stored_h, stored_w = (int(v) for v in self.sizes[index])
        return PlannedJpeg(
            self.encoded(index).numpy().tobytes(),
            stored_h,
            stored_w,
            int(self.orientations[index]),
            box,
            bool(self.flips[index]),
            self.routes[index],
        )

    def to(self, *args: Any, **kwargs: Any) -> JpegBatch:
        return self

    def pin_memory(self, *args: Any) -> JpegBatch:
        return self

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state, strict=True):
            setattr(self, name, value)

    def __repr__(self) -> str:
        on_cpu = sum(1 for route in self.routes if route)
        return f"JpegBatch({len(self)} images, {self.data.numel()} bytes, {on_cpu} for the CPU)"


def collate_planned(
    batch: Sequence[PlannedJpeg], *, collate_fn_map: CollateFnMap | None = None
) -> JpegBatch:
    """Plans → one `JpegBatch`; the bytes are copied once, into the worker's slab if any."""
    lengths = np.fromiter((len(p.data) for p in batch), dtype=np.int64, count=len(batch))
    offsets = np.zeros(len(batch) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    allocator = get_output_allocator()
    data = allocator(total, torch.uint8) if allocator is not None and total else None
    data = torch.empty(total, dtype=torch.uint8) if data is None else data[:total]
    view = data.numpy()
    for plan, start, end in zip(batch, offsets[:-1], offsets[1:], strict=True):
        view[start:end] = np.frombuffer(plan.data, dtype=np.uint8)
    no_box = (-1, -1, -1, -1)
    return JpegBatch(
        data,
        torch.from_numpy(offsets),
        torch.tensor([(p.height, p.width) for p in batch], dtype=torch.int64),
        torch.tensor([p.orientation for p in batch], dtype=torch.int64),
        torch.tensor([tuple(p.box) if p.box else no_box for p in batch], dtype=torch.int64),
        torch.tensor([p.flip for p in batch], dtype=torch.bool),
        tuple(p.route for p in batch),
    )


register_conveyor_type(PlannedJpeg, collate_planned)
