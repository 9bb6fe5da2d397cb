"""The main process's half of GPU decoding: a batch of encoded JPEGs → images on the device.

`GpuCropDecoder` wraps a CPU decoder (`RandomResizedCropDecoder` or `CenterCropDecoder`)
and does its work on a GPU: workers only plan (`GpuCropDecoder.registry()`, see
`conveyor.vision.jpeg_batch`), and the main process decodes each batch with one batched
call (torchvision's ``decode_jpeg(list, device="cuda")``, nvJPEG), crops, turns and resizes
every image on the device with the box its worker drew, flips, converts and normalises the
whole batch at once. Images a GPU decoder does not take (CMYK, progressive, 12-bit, not
JPEG, no end-of-image marker: decided from the header in the worker; or refused by the
decoder: found by splitting the batched call) are decoded by the CPU decoder itself, from
the same box. Images nobody can decode raise (``on_error="raise"``) or are dropped from the
batch with their labels and reported (``on_error="skip"``). Guide: docs/guide/gpu.md.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from conveyor.formats.decoders import IMAGE_EXTENSIONS, DecoderRegistry
from conveyor.formats.errors import BadSampleWarning
from conveyor.vision.backends import open_pillow, pillow_rgb
from conveyor.vision.boxes import CropBox
from conveyor.vision.decoders import RandomResizedCropDecoder
from conveyor.vision.device_crop import center_crop, random_resized_crop
from conveyor.vision.jpeg_batch import CropOp, JpegBatch, JpegPlanner
from conveyor.vision.pixels import open_source

__all__ = ["BatchDecoder", "GpuCropDecoder", "pillow_batch_decoder", "torchvision_batch_decoder"]

BatchDecoder = Callable[[list[torch.Tensor], torch.device], Sequence[torch.Tensor]]
"""``(encoded, device)`` → one CHW uint8 RGB tensor per encoded image (1-D uint8 CPU tensors),
decoded on ``device``; raises if any image cannot be decoded."""

_NO_TORCHVISION = (
    "GpuCropDecoder(device={device!r}) decodes with torchvision's nvJPEG decode_jpeg, and "
    "torchvision does not import here ({error}). Install the torchvision build that matches "
    "your torch, or pass backend= a function (encoded tensors, device) -> CHW uint8 tensors "
    "(nvImageCodec, for one)."
)


def torchvision_batch_decoder(encoded: list[torch.Tensor], device: torch.device) -> Any:
    """torchvision's batched ``decode_jpeg`` (nvJPEG on CUDA), RGB out."""
    from torchvision.io import ImageReadMode, decode_jpeg

    return decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)


def pillow_batch_decoder(encoded: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Pillow, one image at a time, as the CPU decoders' full path (``convert("RGB")``)."""
    images = []
    for data in encoded:
        pixels = np.array(pillow_rgb(open_pillow(data.numpy().tobytes())))
        images.append(torch.from_numpy(pixels).permute(2, 0, 1).to(device))
    return images


def _backend_for(backend: str | BatchDecoder, device: torch.device) -> BatchDecoder:
    if callable(backend):
        return backend
    if backend == "pillow" or (backend == "auto" and device.type == "cpu"):
        return pillow_batch_decoder
    if backend not in ("auto", "torchvision"):
        raise ValueError(
            f"backend must be 'auto', 'torchvision', 'pillow' or a callable, got {backend!r}"
        )
    try:
        import torchvision.io  # noqa: F401
    except Exception as error:  # ImportError, or a torchvision built for another torch
        raise ImportError(_NO_TORCHVISION.format(device=str(device), error=error)) from error
    return torchvision_batch_decoder


class GpuCropDecoder:
    """Batched JPEG decode + crop on a device, with the boxes and output of ``op``.

    Args:
        op: A `RandomResizedCropDecoder` (boxes and flips drawn in the workers, from the
            same generator as ``op`` itself would draw) or a `CenterCropDecoder`; its size,
            dtype, mean/std and ``exif_transpose`` apply. Its ``fast``/``backend`` settings
            are used for the images decoded on the CPU.
        device: Where images are decoded and returned (``"cuda"``, ``"cuda:1"``; ``"cpu"``
            runs the same code with Pillow, for tests and CPU-only runs).
        backend: ``"auto"`` (torchvision's nvJPEG on CUDA, Pillow on the CPU),
            ``"torchvision"``, ``"pillow"``, or a `BatchDecoder` function.
        on_error: ``"raise"``: an image nobody can decode raises ``ValueError`` naming it;
            ``"skip"``: it is dropped from the batch (with its other fields, in
            `decode_batch`), counted in ``skipped`` and reported with a warning.

    ``paths`` counts how images were decoded (``"gpu"``, ``"cpu: progressive JPEG"``, ...).
    Use in the main process; one batch at a time.
    """

    def __init__(
        self,
        op: CropOp,
        device: str | torch.device = "cuda",
        *,
        backend: str | BatchDecoder = "auto",
        on_error: str = "raise",
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.op = op
        self.device = torch.device(device)
        self.on_error = on_error
        self.planner = JpegPlanner(op)
        self._decode_many = _backend_for(backend, self.device)
        self.paths: Counter[str] = Counter()
        self.skipped = 0
        self.skipped_keys: list[str] = []
        self._scale: torch.Tensor | None = None  # per-channel normalisation on the device
        self._shift: torch.Tensor | None = None

    def registry(self, extensions: Iterable[str] = IMAGE_EXTENSIONS) -> DecoderRegistry:
        """The workers' side: a `TarShards` decoder registry that plans (never decodes)."""
        return self.planner.registry(extensions)

    # ------------------------------------------------------------------ one batch
    def __call__(self, jpegs: JpegBatch) -> torch.Tensor:
        """``[n, 3, h, w]`` images on the device, in batch order.

        Raises:
            ValueError: an image could not be decoded (``on_error="skip"`` needs
                `decode_batch`, which can drop rows from the other fields too).
        """
        images, failed = self._decode(jpegs)
        if failed:
            index, error = next(iter(failed.items()))
            raise ValueError(
                f"{len(failed)} image(s) of the batch could not be decoded; image {index} "
                f"({jpegs.routes[index] or 'the GPU decoder refused it'}): {error}"
            ) from error
        return images

    def decode_batch(self, batch: Any, keys: Sequence[str] | None = None) -> Any:
        """``batch`` with each `JpegBatch` in it (a dict value, a list or tuple item, or the
        batch itself) replaced by its decoded images.

        Under ``on_error="skip"``, rows that could not be decoded are dropped from every
        field of the batch's length (tensors along dim 0, lists, tuples), so labels stay
        aligned. ``keys`` (default: the batch's ``"__key__"`` field) name them in the report.
        """
        jpegs, rebuild = _find(batch)
        images, failed = self._decode(jpegs)
        if not failed:
            return rebuild(images)
        if self.on_error == "raise":
            self(jpegs)  # raises, naming the first
        if keys is None and isinstance(batch, Mapping):
            keys = batch.get("__key__")
        names = [str(keys[i]) if keys is not None else f"image {i}" for i in sorted(failed)]
        self._report(names, failed)
        kept = [i for i in range(len(jpegs)) if i not in failed]
        _, rebuild = _find(_take_rows(batch, kept, len(jpegs)))  # the JpegBatch stays put
        return rebuild(images[kept])

    # ---------------------------------------------------------------------- inside
    def _decode(self, jpegs: JpegBatch) -> tuple[torch.Tensor, dict[int, Exception]]:
        height, width = self.op.size
        staging = torch.empty((len(jpegs), 3, height, width), dtype=torch.uint8, device=self.device)
        on_gpu = [i for i, route in enumerate(jpegs.routes) if not route]
        refused: dict[int, Exception] = {}
        decoded = self._robust([jpegs.encoded(i) for i in on_gpu])
        for index, image in zip(on_gpu, decoded, strict=True):
            if isinstance(image, Exception):
                refused[index] = image
                continue
            staging[index] = self._place(image, jpegs, index)
            self.paths["gpu"] += 1
        failed: dict[int, Exception] = {}
        for index in range(len(jpegs)):
            if jpegs.routes[index] or index in refused:
                reason = jpegs.routes[index] or "the GPU decoder refused it"
                try:
                    staging[index] = self._on_cpu(jpegs, index)
                except (ValueError, OSError) as error:
                    failed[index] = error
                    continue
                self.paths[f"cpu: {reason}"] += 1
        return self._finish(staging), failed

    def _robust(self, encoded: list[torch.Tensor]) -> list[torch.Tensor | Exception]:
        """One batched call; if it fails, halves until the images it refuses are found."""
        if not encoded:
            return []
        try:
            return list(self._decode_many(encoded, self.device))
        except Exception as error:
            if len(encoded) == 1:
                return [error]
            middle = len(encoded) // 2
            return self._robust(encoded[:middle]) + self._robust(encoded[middle:])

    def _place(self, image: torch.Tensor, jpegs: JpegBatch, index: int) -> torch.Tensor:
        """A decoded (stored, full-size) image → its crop at ``size``, flipped if drawn so."""
        orientation = int(jpegs.orientations[index])
        top, left, box_h, box_w = (int(v) for v in jpegs.boxes[index])
        if isinstance(self.op, RandomResizedCropDecoder):
            box = CropBox(top, left, box_h, box_w)
            pixels = random_resized_crop(image, box, orientation, self.op.size)
        else:
            pixels = center_crop(image, orientation, self.op.size, self.op.resize_to)
        return pixels.flip(-1) if bool(jpegs.flips[index]) else pixels

    def _on_cpu(self, jpegs: JpegBatch, index: int) -> torch.Tensor:
        """The CPU decoder's pixels for image ``index``, from its worker's box."""
        plan = jpegs.plan(index)
        source = open_source(plan.data, self.op.exif_transpose)
        if isinstance(self.op, RandomResizedCropDecoder):
            assert plan.box is not None
            pixels = self.op.crop_pixels(source, plan.box)
        else:
            pixels = self.op.crop_pixels(source)
        return pixels.flip(-1) if plan.flip else pixels

    def _finish(self, staging: torch.Tensor) -> torch.Tensor:
        """The op's output format: uint8 as is, else ``x / 255`` then ``(x - mean) / std``
        (one multiply and one subtract per channel, as the CPU decoders compute it)."""
        op = self.op
        if op.dtype == torch.uint8:
            return staging
        if self._scale is None:
            self._scale = torch.tensor(op._multiply, dtype=op.dtype, device=self.device)
            self._shift = torch.tensor(op._subtract, dtype=op.dtype, device=self.device)
        out = staging.to(op.dtype)
        out.mul_(self._scale.view(1, -1, 1, 1))
        if op.mean is not None:
            assert self._shift is not None
            out.sub_(self._shift.view(1, -1, 1, 1))
        return out

    def _report(self, names: list[str], failed: dict[int, Exception]) -> None:
        self.skipped += len(names)
        self.skipped_keys.extend(names[: max(0, 100 - len(self.skipped_keys))])
        first = failed[min(failed)]
        warnings.warn(
            f"GpuCropDecoder skipped {len(names)} image(s) of this batch that no decoder "
            f"could read ({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}; first: "
            f"{type(first).__name__}: {first}); {self.skipped} skipped so far",
            BadSampleWarning,
            stacklevel=3,
        )

    def __repr__(self) -> str:
        return f"GpuCropDecoder({self.op!r}, device={str(self.device)!r})"


def _find(batch: Any) -> tuple[JpegBatch, Callable[[torch.Tensor], Any]]:
    """The batch's `JpegBatch` and a function putting decoded images in its place."""
    if isinstance(batch, JpegBatch):
        return batch, lambda images: images
    if isinstance(batch, Mapping):
        for key, value in batch.items():
            if isinstance(value, JpegBatch):
                return value, lambda images, key=key: {**batch, key: images}
    if isinstance(batch, list | tuple):
        for position, value in enumerate(batch):
            if isinstance(value, JpegBatch):

                def rebuild(images: torch.Tensor, position: int = position) -> Any:
                    items = list(batch)
                    items[position] = images
                    return items if isinstance(batch, list) else type(batch)(items)

                return value, rebuild
    raise TypeError(f"no JpegBatch in the batch ({type(batch).__name__})")


def _take_rows(batch: Any, kept: list[int], length: int) -> Any:
    """Keep rows ``kept`` of every field of ``batch`` that has ``length`` rows: tensors along
    dim 0, lists and tuples of ``length`` items; containers are walked (the batch's own
    top level always is, so a ``(images, labels)`` pair is never taken for two rows)."""
    if isinstance(batch, JpegBatch):
        return batch
    if isinstance(batch, Mapping):
        return {key: _rows_of(value, kept, length) for key, value in batch.items()}
    if isinstance(batch, list | tuple):
        items = [_rows_of(value, kept, length) for value in batch]
        if isinstance(batch, list):
            return items
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return _rows_of(batch, kept, length)


def _rows_of(field: Any, kept: list[int], length: int) -> Any:
    if isinstance(field, torch.Tensor):
        if field.dim() and field.shape[0] == length:
            return field[torch.tensor(kept, device=field.device, dtype=torch.long)]
        return field
    if isinstance(field, list | tuple) and len(field) == length:
        rows = [field[i] for i in kept]
        return rows if isinstance(field, list) else tuple(rows)
    if isinstance(field, Mapping | list | tuple):
        return _take_rows(field, kept, length)
    return field
