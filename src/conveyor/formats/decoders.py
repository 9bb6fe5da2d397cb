"""Decoders chosen by file extension, through a registry users extend.

Built in: images through Pillow (``jpg jpeg png ppm pgm pbm pnm bmp gif tif tiff webp``),
``npy``, ``json``/``jsn``, ``txt``/``text``/``transcript`` (UTF-8 str), ``cls``/``cls2``/
``class``/``count``/``index``/``inx``/``idx``/``id`` (int) and ``pt``/``pth`` through
``torch.load(weights_only=True)``. Anything else stays raw ``bytes``. Pickle is never
decoded by default (it runs code); register it yourself for trusted data.

Images are returned as the ``image`` spec says, with WebDataset's and torch's names:
``pil`` (as stored), ``pill``/``pilrgb``/``pilrgba`` (converted PIL images), ``l8``/``rgb8``/
``rgba8`` (HWC uint8 ndarray), ``l``/``rgb``/``rgba`` (HWC float32 ndarray in [0, 1]),
``torchl8``/``torchrgb8``/``torchrgba8`` (CHW uint8 tensor), ``torchl``/``torch``/
``torchrgb``/``torchrgba`` (CHW float32 tensor in [0, 1]); ``numpy`` means ``rgb8``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

__all__ = [
    "IMAGE_EXTENSIONS",
    "IMAGE_SPECS",
    "Decoder",
    "DecoderRegistry",
    "decode_image",
    "register_decoder",
]

Decoder = Callable[[bytes], Any]
"""Turns the raw bytes of one file into a value."""

IMAGE_EXTENSIONS = frozenset(
    ["jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "bmp", "gif", "tif", "tiff", "webp"]
)

# spec -> (output kind, PIL mode to convert to or None, float in [0, 1]?)
IMAGE_SPECS: dict[str, tuple[str, str | None, bool]] = {
    "pil": ("pil", None, False),
    "pill": ("pil", "L", False),
    "pilrgb": ("pil", "RGB", False),
    "pilrgba": ("pil", "RGBA", False),
    "l8": ("numpy", "L", False),
    "rgb8": ("numpy", "RGB", False),
    "numpy": ("numpy", "RGB", False),
    "rgba8": ("numpy", "RGBA", False),
    "l": ("numpy", "L", True),
    "rgb": ("numpy", "RGB", True),
    "rgba": ("numpy", "RGBA", True),
    "torchl8": ("torch", "L", False),
    "torchrgb8": ("torch", "RGB", False),
    "torchrgba8": ("torch", "RGBA", False),
    "torchl": ("torch", "L", True),
    "torch": ("torch", "RGB", True),
    "torchrgb": ("torch", "RGB", True),
    "torchrgba": ("torch", "RGBA", True),
}


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("decoding images needs Pillow: pip install conveyor[image]") from error
    return Image


def decode_image(data: bytes, spec: str = "torchrgb8") -> Any:
    """Decode image bytes with Pillow into the form ``spec`` names (see module docs)."""
    kind, mode, scaled = IMAGE_SPECS[spec]
    image = _pillow().open(io.BytesIO(data))
    if mode is not None and image.mode != mode:
        image = image.convert(mode)
    if kind == "pil":
        image.load()
        return image
    array = np.asarray(image)  # read-only: every branch below returns a writable copy
    if scaled:
        array = array.astype(np.float32) / np.float32(255.0)
    elif kind == "numpy":
        array = array.copy()
    if kind == "numpy":
        return array
    import torch

    if array.ndim == 2:
        return torch.from_numpy(array[None].copy() if not scaled else array[None])
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def _npy(data: bytes) -> Any:
    return np.load(io.BytesIO(data), allow_pickle=False)


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _int(data: bytes) -> int:
    return int(data.strip())


def _torch_load(data: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


_DEFAULTS: dict[str, Decoder] = {
    "npy": _npy,
    "json": json.loads,
    "jsn": json.loads,
    "pt": _torch_load,
    "pth": _torch_load,
}
_DEFAULTS.update(dict.fromkeys(("txt", "text", "transcript"), _text))
_DEFAULTS.update(
    dict.fromkeys(("cls", "cls2", "class", "count", "index", "inx", "idx", "id"), _int)
)


def register_decoder(extensions: str | Iterable[str], decoder: Decoder) -> None:
    """Add a default decoder for registries created from now on (in this process).

    Prefer ``DecoderRegistry(decoders=...)``: it also reaches spawned worker processes.
    """
    for ext in [extensions] if isinstance(extensions, str) else extensions:
        _DEFAULTS[ext.lower().lstrip(".")] = decoder


class DecoderRegistry:
    """Extension -> decoder, applied to whole samples or to single values.

    Args:
        image: image spec (see module docs), or None to leave images as bytes.
        decoders: extra or replacing decoders by extension (``{"seg.png": fn}`` matches
            that full extension before the last part, ``png``, is tried).
        defaults: False to start from an empty registry (only ``decoders`` then apply).

    Picklable when its decoders are. Unknown extensions give the raw bytes back.
    """

    def __init__(
        self,
        image: str | None = "torchrgb8",
        decoders: Mapping[str, Decoder] | None = None,
        *,
        defaults: bool = True,
    ) -> None:
        if image is not None and image not in IMAGE_SPECS:
            raise ValueError(f"unknown image spec {image!r}; choose one of {sorted(IMAGE_SPECS)}")
        self.image = image
        self.table: dict[str, Decoder] = dict(_DEFAULTS) if defaults else {}
        for ext, decoder in (decoders or {}).items():
            self.table[ext.lower().lstrip(".")] = decoder

    def register(self, extensions: str | Iterable[str], decoder: Decoder) -> None:
        """Decode ``extensions`` (one or several) with ``decoder`` from now on."""
        for ext in [extensions] if isinstance(extensions, str) else extensions:
            self.table[ext.lower().lstrip(".")] = decoder

    def decoder_for(self, extension: str) -> Decoder | None:
        """The decoder for a (possibly multi-part) extension, or None to keep bytes."""
        ext = extension.lower()
        found = self.table.get(ext)
        if found is not None:
            return found
        last = ext.rsplit(".", 1)[-1]
        found = self.table.get(last)
        if found is None and self.image is not None and last in IMAGE_EXTENSIONS:
            return self._decode_image
        return found

    def _decode_image(self, data: bytes) -> Any:
        assert self.image is not None
        return decode_image(data, self.image)

    def decode_value(self, extension: str, data: Any) -> Any:
        """Decode one value (bytes, or a readable stream read to its end)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            read = getattr(data, "read", None)
            if read is None:
                return data  # already decoded upstream
            raw = read()
            getattr(data, "close", lambda: None)()
            data = raw
        decoder = self.decoder_for(extension)
        return data if decoder is None else decoder(bytes(data))

    def decode_sample(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``sample`` with every non-``__dunder__`` entry decoded by its key."""
        return {
            key: value if key.startswith("__") else self.decode_value(key, value)
            for key, value in sample.items()
        }
