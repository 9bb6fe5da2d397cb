"""torch's module path ``datapipes.utils.decoder``: the basic extension handlers."""

from __future__ import annotations

import io
import json
from typing import Any

import torch

from conveyor.datapipes.iter.decoding import extension_extract_fn

__all__ = ["basichandlers", "extension_extract_fn"]

_TEXT = frozenset(["txt", "text", "transcript"])
_INTEGER = frozenset(["cls", "cls2", "class", "count", "index", "inx", "id"])
_JSON = frozenset(("json", "jsn"))
_PICKLE = frozenset(("pyd", "pickle"))


def basichandlers(extension: str, data: bytes) -> Any:
    """torch's text, integer, JSON and ``.pt`` payloads; None for other extensions.

    Unlike torch's, a ``.pickle``/``.pyd`` payload is refused (unpickling shard content runs
    whatever code the shard's author put there) and ``.pt`` loads tensors only.
    """
    if extension in _TEXT:
        return data.decode("utf-8")
    if extension in _INTEGER:
        try:
            return int(data)
        except ValueError:
            return None
    if extension in _JSON:
        return json.loads(data)
    if extension in _PICKLE:
        raise ValueError(
            f"basichandlers does not unpickle '.{extension}' payloads: unpickling data from a "
            "shard runs code the shard carries. Store the sample as .json, .npy or .pt "
            "(tensors), or, for shards you trust, decode it with your own handler."
        )
    if extension == "pt":
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    return None
