"""JPEG decoding at 1/1, 1/2, 1/4 or 1/8 scale (the IDCT's own downscale), and full decodes.

Two decoders: simplejpeg (the ``conveyor[jpeg]`` extra: libjpeg-turbo in a PyPI wheel,
decoding straight into a NumPy array without the GIL) and Pillow's ``draft`` (always there
with ``conveyor[image]``). Neither exposes libjpeg-turbo's partial decoding
(``jpeg_crop_scanline``/``jpeg_skip_scanlines``), so both decode the whole frame at the chosen
scale; docs/benchmarks.md ("Decode at training size") measures what that leaves behind.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from conveyor.formats.jpeg_header import JpegHeader

__all__ = [
    "BACKENDS",
    "decode_scaled",
    "open_pillow",
    "pillow_filter",
    "pillow_image",
    "pillow_rgb",
    "resolve_backend",
]

BACKENDS = ("auto", "simplejpeg", "pillow")
SCALES = (8, 4, 2, 1)
"""Denominators the IDCT scales by with SIMD code; libjpeg-turbo's other M/8 factors run
in plain C and decode slower than 1/1 (measured: 6/8 1.04 ms, 5/8 0.92 ms, 1/1 0.81 ms)."""

_simplejpeg: Any = None


def _import_simplejpeg() -> Any:
    global _simplejpeg
    if _simplejpeg is None:
        try:
            import simplejpeg
        except ImportError:
            _simplejpeg = False
        else:
            _simplejpeg = simplejpeg
    return _simplejpeg or None


def resolve_backend(backend: str) -> str:
    """``"auto"`` -> simplejpeg if it imports, else Pillow; a named one must import."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "pillow":
        return "pillow"
    if _import_simplejpeg() is not None:
        return "simplejpeg"
    if backend == "simplejpeg":
        raise ImportError("backend='simplejpeg' needs simplejpeg: pip install conveyor[jpeg]")
    return "pillow"


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("decoding images needs Pillow: pip install conveyor[image]") from error
    return Image


def open_pillow(data: bytes) -> Any:
    """A lazily opened Pillow image (header read, pixels not decoded)."""
    return _pillow().open(io.BytesIO(data))


def pillow_image(pixels: np.ndarray[Any, Any]) -> Any:
    """A Pillow image over HWC uint8 RGB pixels."""
    return _pillow().fromarray(pixels)


def pillow_filter() -> Any:
    """Pillow's ``BILINEAR`` (antialiased when it downscales), torchvision's default."""
    return _pillow().Resampling.BILINEAR


def pillow_rgb(image: Any) -> np.ndarray[Any, Any]:
    """Decode an opened Pillow image as the reference does (``convert("RGB")``): HWC uint8,
    read-only (it is Pillow's buffer)."""
    if image.mode != "RGB":
        image = image.convert("RGB")
    return np.asarray(image)


def decode_scaled(
    data: bytes, header: JpegHeader, denominator: int, backend: str
) -> np.ndarray[Any, Any]:
    """The JPEG decoded at ``1/denominator`` (RGB, HWC uint8): ``ceil(size / denominator)``.

    Raises ``ValueError``/``OSError`` on bad data (simplejpeg is strict: a warning such as
    "extraneous bytes before marker" raises, and the caller retries with Pillow).
    """
    height = -(-header.height // denominator)
    width = -(-header.width // denominator)
    if backend == "simplejpeg":
        pixels: np.ndarray[Any, Any] = _simplejpeg.decode_jpeg(
            data, colorspace="RGB", min_height=height, min_width=width
        )
    else:
        image = open_pillow(data)
        if denominator > 1:  # Pillow picks the largest scale leaving at least this size
            image.draft("RGB", (header.width // denominator, header.height // denominator))
        pixels = pillow_rgb(image)
    if pixels.shape[:2] != (height, width):
        raise ValueError(
            f"decoder gave {pixels.shape[1]}x{pixels.shape[0]} pixels at scale "
            f"1/{denominator}; expected {width}x{height}"
        )
    return pixels
