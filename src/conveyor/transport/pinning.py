"""Copying batches into pinned (page-locked) host memory.

Pinned memory lets host-to-device copies run asynchronously (``tensor.to(device,
non_blocking=True)``), so they overlap with compute. Pure functions: the thread that pins
batches as they arrive lives in ``engine/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from conveyor.transport.structure import rebuild_mapping, rebuild_sequence

__all__ = [
    "MPS_UNSUPPORTED_WARNING",
    "NO_ACCELERATOR_WARNING",
    "pin_memory",
    "pin_memory_available",
]

NO_ACCELERATOR_WARNING = (
    "'pin_memory' argument is set as true but no accelerator is found, "
    "then device pinned memory won't be used."
)
"""torch's exact warning when ``pin_memory=True`` finds no accelerator (loading carries on)."""

MPS_UNSUPPORTED_WARNING = (
    "'pin_memory' argument is set as true but not supported on MPS now, "
    "device pinned memory won't be used."
)
"""torch's exact warning when the accelerator is Apple MPS, where pinning is turned off."""


def pin_memory_available(device: str = "") -> bool:
    """Whether :func:`pin_memory` can pin here, decided as torch's DataLoader decides it.

    Args:
        device: The DataLoader's ``pin_memory_device``. torch deprecated it and pins for the
            current accelerator; "" asks about that one, a non-empty value must also name
            the current accelerator's device type (``"cuda"``, ``"cuda:1"``, ...).

    Returns:
        False with no accelerator (warn with :data:`NO_ACCELERATOR_WARNING`) or on MPS (warn
        with :data:`MPS_UNSUPPORTED_WARNING`), True otherwise.
    """
    if not torch.accelerator.is_available():
        return False
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type == "mps":
        return False
    return not device or torch.device(device).type == accelerator.type


def pin_memory(data: Any, device: str | None = None) -> Any:
    """Same as torch's ``_utils.pin_memory.pin_memory``: pin every tensor in ``data``.

    Tensors and objects with a ``pin_memory()`` method are pinned (that method's result is
    used); str and bytes are returned as they are; mappings, namedtuples, tuples and
    sequences are rebuilt with their own type where possible, else as a dict or list (torch's
    rules); anything else is returned unchanged. ``device`` is passed down for signature
    compatibility only: like torch, tensors are pinned for the current accelerator.

    Raises:
        RuntimeError: from ``Tensor.pin_memory()`` when no accelerator is available; check
            :func:`pin_memory_available` first.
    """
    if isinstance(data, torch.Tensor):
        return data.pin_memory()
    if hasattr(data, "pin_memory"):
        return data.pin_memory()
    if isinstance(data, str | bytes):
        return data
    if isinstance(data, Mapping):
        values = {key: pin_memory(value, device) for key, value in data.items()}
        return values if type(data) is dict else rebuild_mapping(data, values)
    if isinstance(data, tuple):
        if hasattr(data, "_fields"):  # namedtuple
            return type(data)(*(pin_memory(item, device) for item in data))
        return type(data)(pin_memory(item, device) for item in data)
    if isinstance(data, Sequence):
        items = [pin_memory(item, device) for item in data]
        return items if type(data) is list else rebuild_sequence(data, items)
    return data
