"""Decode at training size: `RandomResizedCropDecoder` (training) and `CenterCropDecoder`
(evaluation), each one callable from encoded bytes to a CHW tensor.

One object serves as a `TarShards` decoder (``decode=op.registry()``), a DataPipe map
function (``dp.map(op)``, ``dp.map(op, input_col="jpg")``) and a plain function in a
map-style dataset's ``__getitem__``. The crop is planned from the header alone (torchvision's
algorithms, in the displayed image's coordinates, from the worker's generator), so the fast
path and the full decode crop the same boxes for the same seed; only how the box's pixels are
decoded differs (see `conveyor.vision.pixels`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from conveyor.engine.workers.worker_info import get_worker_info
from conveyor.formats.decoders import IMAGE_EXTENSIONS, DecoderRegistry
from conveyor.vision.backends import resolve_backend
from conveyor.vision.boxes import CropBox, random_resized_crop_box, resized_center_crop
from conveyor.vision.pixels import Source, open_source, read_bytes, resize_box, scale_for

__all__ = ["CenterCropDecoder", "RandomResizedCropDecoder"]


def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    pair = (int(size), int(size)) if isinstance(size, int) else tuple(int(s) for s in size)
    if len(pair) == 1:
        pair = (pair[0], pair[0])
    if len(pair) != 2 or min(pair) <= 0:
        raise ValueError(f"size must be a positive int or (height, width), got {size!r}")
    return pair[0], pair[1]


class _CropDecoder:
    """What both decoders share: output format, backend, the path counters, the registry."""

    def __init__(
        self,
        size: int | Sequence[int],
        dtype: torch.dtype,
        mean: Sequence[float] | None,
        std: Sequence[float] | None,
        fast: bool,
        exif_transpose: bool,
        backend: str,
    ) -> None:
        self.size = _pair(size)
        if dtype != torch.uint8 and not dtype.is_floating_point:
            raise ValueError(f"dtype must be torch.uint8 or a floating dtype, got {dtype}")
        if (mean is None) != (std is None) or (mean is not None and dtype == torch.uint8):
            raise ValueError("mean and std go together, with a floating dtype")
        self.dtype = dtype
        self.mean = None if mean is None else tuple(float(m) for m in mean)
        self.std = None if std is None else tuple(float(s) for s in std)
        # x / 255 then (x - mean) / std, as one multiply and one subtract per channel
        std_ = self.std or (1.0, 1.0, 1.0)
        self._multiply = [1.0 / (255.0 * s) for s in std_]
        self._subtract = [m / s for m, s in zip(self.mean or (0.0,) * 3, std_, strict=True)]
        self.fast = fast
        self.exif_transpose = exif_transpose
        self.backend = resolve_backend(backend)
        self.paths: Counter[str] = Counter()
        """How images were decoded in this process (``"fast 1/2"``, ``"fallback: ..."``)."""

    @property
    def _how(self) -> tuple[bool, str]:
        return self.fast, self.backend

    def registry(self, extensions: Iterable[str] = IMAGE_EXTENSIONS) -> DecoderRegistry:
        """A `DecoderRegistry` decoding ``extensions`` with this op (for `TarShards`)."""
        return DecoderRegistry(decoders=dict.fromkeys(extensions, self))

    def _open(self, data: Any) -> Source:
        return open_source(read_bytes(data), self.exif_transpose)

    def _finish(self, chw: torch.Tensor, flip: bool, out: torch.Tensor | None) -> torch.Tensor:
        if flip:
            chw = chw.flip(-1)
        if out is None:
            if self.dtype == torch.uint8:
                return chw
            out = torch.empty(chw.shape, dtype=self.dtype)
        out.copy_(chw)
        if self.dtype != torch.uint8:
            out.mul_(torch.tensor(self._multiply, dtype=out.dtype).view(-1, 1, 1))
            if self.mean is not None:
                out.sub_(torch.tensor(self._subtract, dtype=out.dtype).view(-1, 1, 1))
        return out

    def __call__(self, data: Any, out: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, fast={self.fast}, {self.backend!r})"


class RandomResizedCropDecoder(_CropDecoder):
    """Decode + ``RandomResizedCrop(size, scale, ratio)`` + ``RandomHorizontalFlip(flip)``.

    Args:
        size: output (height, width), or one int for a square.
        scale: as torchvision: the range of the box's area, a fraction of the image's.
        ratio: as torchvision: the range of the box's aspect ratio (width / height).
        flip: probability of a horizontal flip (0 for none), drawn after the box, as
            ``RandomHorizontalFlip`` after ``RandomResizedCrop`` draws.
        dtype: ``torch.uint8`` (CHW, 0-255) or a floating dtype (0-1, then ``(x - mean) /
            std`` if both are given).
        generator: the ``torch.Generator`` to draw from. None: the worker's own
            (``get_worker_info().rng.torch``) in a conveyor worker, else torch's default
            generator, from which torchvision draws: after ``torch.manual_seed(s)`` the
            boxes are torchvision's. A generator given here is copied into every worker
            process, so each would draw the same boxes; leave it None with workers.
        fast: decode at reduced size where the box allows (False: full decode with Pillow,
            then the same crop; the boxes are the same either way).
        exif_transpose: apply the EXIF orientation as ``PIL.ImageOps.exif_transpose``
            (default False: as ``Image.open(...).convert("RGB")`` and torchvision, which
            ignore it); boxes are drawn on the image as displayed.
        backend: ``"auto"`` (simplejpeg if installed, else Pillow), ``"simplejpeg"`` or
            ``"pillow"``.

    Calling it on encoded bytes (or a path, or a stream) returns a CHW tensor of ``size``;
    ``out=`` writes into a given tensor (a slot of a batch) instead. Bilinear, antialiased
    resizing only (torchvision's default). Undecodable data raises ``ValueError``/``OSError``
    (inside `TarShards` a `SampleError` naming shard and key, skipped under
    ``on_error="skip"``). Picklable; ``paths`` counts in each process how images went.
    """

    def __init__(
        self,
        size: int | Sequence[int] = 224,
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
        *,
        flip: float = 0.5,
        dtype: torch.dtype = torch.uint8,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        generator: torch.Generator | None = None,
        fast: bool = True,
        exif_transpose: bool = False,
        backend: str = "auto",
    ) -> None:
        super().__init__(size, dtype, mean, std, fast, exif_transpose, backend)
        if not 0 < scale[0] <= scale[1] or not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"scale and ratio must be (min, max) > 0, got {scale}, {ratio}")
        if not 0.0 <= flip <= 1.0:
            raise ValueError(f"flip must be a probability, got {flip}")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.flip = flip
        self.generator = generator

    def _generator(self) -> torch.Generator | None:
        if self.generator is not None:
            return self.generator
        info = get_worker_info()
        return info.rng.torch if info is not None and info.rng is not None else None

    def draw(self, height: int, width: int) -> tuple[CropBox, bool]:
        """The box and flip for a displayed ``height`` x ``width`` image (consumes draws)."""
        generator = self._generator()
        box = random_resized_crop_box(height, width, self.scale, self.ratio, generator)
        flip = self.flip > 0 and torch.rand(1, generator=generator).item() < self.flip
        return box, bool(flip)

    def render(
        self, source: Source, box: CropBox, flip: bool, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The output for a planned ``box`` (displayed coordinates) and ``flip``."""
        return self._finish(self.crop_pixels(source, box), flip, out)

    def crop_pixels(self, source: Source, box: CropBox) -> torch.Tensor:
        """The box resized to ``size``: CHW uint8, before flip, dtype and normalisation."""
        corners = (box.left, box.top, box.left + box.width, box.top + box.height)
        denominator = scale_for((box.height, box.width), self.size) if self.fast else 1
        return resize_box(source, corners, self.size, denominator, self._how, self.paths)

    def __call__(self, data: Any, out: torch.Tensor | None = None) -> torch.Tensor:
        source = self._open(data)
        box, flip = self.draw(*source.shown_size)
        return self.render(source, box, flip, out)


class CenterCropDecoder(_CropDecoder):
    """Decode + torchvision's ``Resize(resize_to)`` + ``CenterCrop(size)``: evaluation.

    Deterministic. The image is decoded at the smallest IDCT scale that keeps it at least
    the resized size on both axes, resized (shorter side to ``resize_to``, antialiased
    bilinear) and centre-cropped. Other arguments as `RandomResizedCropDecoder`.
    """

    def __init__(
        self,
        size: int | Sequence[int] = 224,
        resize_to: int = 256,
        *,
        dtype: torch.dtype = torch.uint8,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        fast: bool = True,
        exif_transpose: bool = False,
        backend: str = "auto",
    ) -> None:
        super().__init__(size, dtype, mean, std, fast, exif_transpose, backend)
        if resize_to <= 0:
            raise ValueError(f"resize_to must be positive, got {resize_to}")
        self.resize_to = int(resize_to)

    def __call__(self, data: Any, out: torch.Tensor | None = None) -> torch.Tensor:
        return self._finish(self.crop_pixels(self._open(data)), False, out)

    def crop_pixels(self, source: Source) -> torch.Tensor:
        """Resized and centre-cropped: CHW uint8, before dtype and normalisation."""
        height, width = source.shown_size
        plan = resized_center_crop(height, width, self.size, self.resize_to)
        denominator = scale_for((height, width), plan.resized) if self.fast else 1
        whole = (0, 0, width, height)
        resized = resize_box(source, whole, plan.resized, denominator, self._how, self.paths)
        top, left, crop_h, crop_w = plan.crop
        return resized[:, top : top + crop_h, left : left + crop_w]
