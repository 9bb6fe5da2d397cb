"""torch's DataLoader as the oracle inside a Ray driver.

torch's fork workers would collect garbage inherited from this process, and a Ray handle
in it calls Ray's core from the child (a deadlock, or RPCs on the driver's sockets that
abort it). conveyor's own process workers never do (engine/workers/forking.py); for torch's, the
tests freeze the garbage around the epoch themselves.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator
from typing import Any

import torch.utils.data as tud

__all__ = ["drain", "parent_garbage_frozen", "torch_batches"]


@contextlib.contextmanager
def parent_garbage_frozen() -> Iterator[None]:
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def torch_batches(dataset: Any, **options: Any) -> list[Any]:
    """torch's batches for ``dataset`` (its workers started with the garbage frozen)."""
    return drain(tud.DataLoader(dataset, **options))


def drain(loader: Iterable[Any]) -> list[Any]:
    with parent_garbage_frozen():
        return list(loader)
