"""torch's module path ``datapipes.utils.decoder``: the basic extension handlers."""

from __future__ import annotations

import io
import json
import pickle
from typing import Any

import torch

from conveyor.datapipes.iter.decoding import extension_extract_fn

__all__ = ["basichandlers", "extension_extract_fn"]

_TEXT = frozenset(["txt", "text", "transcript"])
_INTEGER = frozenset(["cls", "cls2", "class", "count", "index", "inx", "id"])
_JSON = frozenset(("json", "jsn"))
_PICKLE = frozenset(("pyd", "pickle"))


def basichandlers(extension: str, data: bytes) -> Any:
    """Same as torch's: text, integer, JSON, pickle and ``.pt`` payloads; None otherwise."""
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
        return pickle.loads(data)
    if extension == "pt":
        return torch.load(io.BytesIO(data))
    return None
