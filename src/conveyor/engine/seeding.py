"""Worker seeding, identical to torch's so augmentations reproduce across the two loaders."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class EpochSeeds:
    """The seeds of one epoch: the workers' base seed and the graph seed every worker and
    rank shares (DataPipe graphs only, else None)."""

    base_seed: int
    shared_seed: int | None = None


def draw_base_seed(generator: torch.Generator | None) -> int:
    """One 64-bit draw from the loader's generator, exactly where and how torch draws it."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def numpy_seed_state(base_seed: int, worker_id: int) -> np.ndarray[Any, Any]:
    """NumPy's seed for a worker: a SeedSequence over (worker_id, base_seed) as torch builds it.

    torch hand-rolls the same SeedSequence hash so that ``numpy.random`` and ``random``
    streams differ even though both derive from ``base_seed``.
    """
    entropy = [worker_id, base_seed & MASK32, base_seed >> 32, 0]
    return np.random.SeedSequence(entropy).generate_state(4)


def seed_process_rngs(base_seed: int, worker_id: int) -> int:
    """Seed ``random``, torch and NumPy global state for a process worker; returns the seed."""
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(numpy_seed_state(base_seed, worker_id))
    return seed
