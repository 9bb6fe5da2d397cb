"""torch's module path ``datapipes.utils.snapshot``: fast-forward a graph by N samples."""

from __future__ import annotations

from typing import Any

import torch

from conveyor.datapipes._hook_iterator import _SnapshotState
from conveyor.datapipes.settings import apply_random_seed

__all__ = ["_simple_graph_snapshot_restoration"]


def _simple_graph_snapshot_restoration(
    datapipe: Any, n_iterations: int, rng: torch.Generator | None = None
) -> None:
    """Restart ``datapipe`` from its first sample (seeded by ``rng``), read ``n_iterations``
    samples, and make the next ``iter()`` continue from there (torch's semantics).

    conveyor resumes through the pipe's own state (``state_dict`` / ``load_state_dict``), so
    the restored iterator owns no reference to a half-read one.
    """
    if _snapshot_state(datapipe) is _SnapshotState.Restored:
        raise RuntimeError(
            "Snapshot restoration cannot be applied. You can only restore simple snapshot to "
            "the graph if your graph has not been restored."
        )
    datapipe.reset()
    apply_random_seed(datapipe, rng if rng is not None else torch.Generator())
    iterator = iter(datapipe)
    for _ in range(n_iterations):
        try:
            next(iterator)
        except StopIteration:
            raise RuntimeError(
                f"Fast-forward {datapipe} by {n_iterations} iterations exceeds the number of "
                "samples available."
            ) from None
    datapipe.load_state_dict(datapipe.state_dict())
    datapipe._snapshot_restored = True


def _snapshot_state(datapipe: Any) -> _SnapshotState:
    """Restored until the restored pass is started, as in torch."""
    if getattr(datapipe, "_snapshot_restored", False) and getattr(datapipe, "_pending", None):
        return _SnapshotState.Restored
    return _SnapshotState.NotStarted
