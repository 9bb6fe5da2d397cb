"""torch's module path ``torch.utils.data._utils.worker``: worker info and seeding helpers."""

from __future__ import annotations

from conveyor.engine.workers.seeding import numpy_seed_state
from conveyor.engine.workers.worker_info import WorkerInfo, get_worker_info

__all__ = ["WorkerInfo", "get_worker_info"]

_worker_info: WorkerInfo | None = None
"""torch's private global, kept so code that saves and restores it keeps working.

conveyor does not read it: `get_worker_info` knows its workers (threads included)."""


def _generate_state(base_seed: int, worker_id: int) -> list[int]:
    """The four 32-bit words torch seeds a worker's NumPy generator with (same values)."""
    return [int(word) for word in numpy_seed_state(base_seed, worker_id)]
