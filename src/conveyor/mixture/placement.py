"""Which global positions of the mixture one replica (a worker of a rank) produces.

The loader's global batch ``g`` covers positions ``[start + g * B, start + (g + 1) * B)``
(``start``: where the run began or resumed). Rank ``r`` of ``W`` delivers the batches
``g = j * W + r`` in order ``j = 0, 1, ...``, and its worker ``w`` of ``N`` produces
those with ``j = w, w + N, ...``. So a training step's global batch (rank 0's to rank
``W - 1``'s) is one contiguous window of the schedule, whatever ``N`` and ``W`` are, and
resuming on another topology only changes who produces which later position.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Placement"]

_SINGLE_CHUNK = 8192  # a single replica takes positions in runs of this size


@dataclass(frozen=True)
class Placement:
    """One replica's share of the positions: worker of a rank, with the batch size."""

    worker_id: int = 0
    num_workers: int = 1
    rank: int = 0
    world_size: int = 1
    batch_size: int = 1

    def __post_init__(self) -> None:
        for name in ("num_workers", "world_size", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"Placement {name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.worker_id < self.num_workers:
            raise ValueError(f"worker_id {self.worker_id} not in [0, {self.num_workers})")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} not in [0, {self.world_size})")

    @property
    def replicas(self) -> int:
        return self.num_workers * self.world_size

    def ranges(self, start: int) -> Iterator[tuple[int, int]]:
        """This replica's positions from ``start`` on, as increasing ``[begin, end)`` runs."""
        if self.replicas == 1:
            for begin in itertools.count(start, _SINGLE_CHUNK):
                yield begin, begin + _SINGLE_CHUNK
        size = self.batch_size
        for j in itertools.count(self.worker_id, self.num_workers):
            batch = j * self.world_size + self.rank
            yield start + batch * size, start + (batch + 1) * size
