"""Interoperation with user code written against ``torch.utils.data``.

Users switching imports keep datasets that subclass torch's classes and call
``torch.utils.data.get_worker_info()``. conveyor never imports ``torch.utils.data``
to do its work; ``import torch`` has already loaded it, so this module only *looks it
up* in ``sys.modules`` to recognise torch's dataset classes and to publish the
worker info where torch-style code reads it.
"""

from __future__ import annotations

import sys
from typing import Any

_TORCH_DATASET_MODULE = "torch.utils.data.dataset"
_TORCH_WORKER_MODULE = "torch.utils.data._utils.worker"


def _torch_attr(module: str, name: str) -> Any:
    loaded = sys.modules.get(module)
    return getattr(loaded, name, None) if loaded is not None else None


def is_iterable_style(dataset: object) -> bool:
    """True for conveyor or torch iterable-style datasets (and so DataPipes)."""
    from conveyor.dataset import IterableDataset

    if isinstance(dataset, IterableDataset):
        return True
    torch_iterable = _torch_attr(_TORCH_DATASET_MODULE, "IterableDataset")
    return torch_iterable is not None and isinstance(dataset, torch_iterable)


def torch_worker_info() -> Any:
    """What ``torch.utils.data.get_worker_info()`` returns here (a worker of torch's loader)."""
    return _torch_attr(_TORCH_WORKER_MODULE, "_worker_info")


def publish_worker_info(info: object | None) -> None:
    """Make ``torch.utils.data.get_worker_info()`` return ``info`` in this worker too."""
    module = sys.modules.get(_TORCH_WORKER_MODULE)
    if module is not None:
        module._worker_info = info  # type: ignore[attr-defined]
