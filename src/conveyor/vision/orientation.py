"""EXIF orientation as Pillow's ``ImageOps.exif_transpose`` applies it, on boxes and arrays.

A box drawn on the image as displayed (after the transpose) maps to a region of the image
as stored; decoding that region and transposing it gives exactly the displayed box, so a
decoder can crop first and turn only what it kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SWAPS_AXES", "orient", "stored_region"]

SWAPS_AXES = frozenset([5, 6, 7, 8])
"""Orientations whose displayed image is the stored one with width and height swapped."""


def stored_region(
    orientation: int, box: tuple[int, int, int, int], width: int, height: int
) -> tuple[int, int, int, int]:
    """The stored image's ``(x0, y0, x1, y1)`` under the displayed box ``(x0, y0, x1, y1)``.

    ``width``/``height`` are the stored image's; orientation 1 (or unknown) is the identity.
    """
    x0, y0, x1, y1 = box
    if orientation == 2:  # FLIP_LEFT_RIGHT
        return width - x1, y0, width - x0, y1
    if orientation == 3:  # ROTATE_180
        return width - x1, height - y1, width - x0, height - y0
    if orientation == 4:  # FLIP_TOP_BOTTOM
        return x0, height - y1, x1, height - y0
    if orientation == 5:  # TRANSPOSE
        return y0, x0, y1, x1
    if orientation == 6:  # ROTATE_270
        return y0, height - x1, y1, height - x0
    if orientation == 7:  # TRANSVERSE
        return width - y1, height - x1, width - y0, height - x0
    if orientation == 8:  # ROTATE_90
        return width - y1, x0, width - y0, x1
    return box


def orient(pixels: np.ndarray[Any, Any], orientation: int) -> np.ndarray[Any, Any]:
    """``pixels`` (HWC) as displayed: a view with Pillow's transpose for ``orientation``."""
    if orientation == 2:
        return pixels[:, ::-1]
    if orientation == 3:
        return pixels[::-1, ::-1]
    if orientation == 4:
        return pixels[::-1]
    swapped = pixels.transpose(1, 0, 2)
    if orientation == 5:
        return swapped
    if orientation == 6:
        return swapped[:, ::-1]
    if orientation == 7:
        return swapped[::-1, ::-1]
    if orientation == 8:
        return swapped[::-1]
    return pixels
