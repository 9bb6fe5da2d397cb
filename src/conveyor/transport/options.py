"""Settings of the shared-memory transport: what the user may tune, and what a worker gets.

`SlabOptions` is what a loader is configured with (defaults come from the environment, so a
deployment can cap shared memory without touching code); `SlabConfig` is the resolved,
per-loader form handed to every worker process.
"""

from __future__ import annotations

import os
from typing import NamedTuple

__all__ = ["ENV_SHM_DIR", "ENV_SHM_MAX_BYTES", "ENV_SLABS_PER_WORKER", "SlabConfig", "SlabOptions"]

ENV_SHM_DIR = "CONVEYOR_SHM_DIR"
"""Directory of the tmpfs holding slabs (default ``/dev/shm``)."""
ENV_SHM_MAX_BYTES = "CONVEYOR_SHM_MAX_BYTES"
"""Most bytes of shared memory one loader's slabs may take, all workers together
(0 disables slabs: every batch is pickled through the worker's pipe)."""
ENV_SLABS_PER_WORKER = "CONVEYOR_SLABS_PER_WORKER"
"""Most slabs one worker keeps (default ``prefetch_factor + 3``)."""

DEFAULT_SHM_DIR = "/dev/shm"
DEFAULT_INLINE_MAX_BYTES = 4096


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer number of bytes/slabs") from None
    if value < 0:
        raise ValueError(f"{name}={raw!r} must not be negative")
    return value


class SlabOptions(NamedTuple):
    """How a loader's worker processes hand batches to the main process."""

    shm_dir: str = DEFAULT_SHM_DIR
    """A tmpfs directory for the slab files (``/dev/shm`` on Linux)."""
    max_shm_bytes: int | None = None
    """Cap on slab bytes for the whole loader, split evenly between workers. None: only the
    free space of ``shm_dir`` limits it. 0: no slabs at all (batches go through the pipe)."""
    slabs_per_worker: int | None = None
    """Most slabs a worker keeps; None means ``prefetch_factor + 3`` (at least 4)."""
    inline_max_bytes: int = DEFAULT_INLINE_MAX_BYTES
    """Tensors and arrays up to this size travel inside the pipe message, not in a slab."""

    @classmethod
    def from_env(cls) -> SlabOptions:
        """Defaults, overridden by ``CONVEYOR_SHM_DIR``, ``CONVEYOR_SHM_MAX_BYTES`` and
        ``CONVEYOR_SLABS_PER_WORKER``."""
        options = cls(shm_dir=os.environ.get(ENV_SHM_DIR) or DEFAULT_SHM_DIR)
        max_bytes = _env_int(ENV_SHM_MAX_BYTES)
        if max_bytes is not None:
            options = options._replace(max_shm_bytes=max_bytes)
        slabs = _env_int(ENV_SLABS_PER_WORKER)
        if slabs is not None:
            options = options._replace(slabs_per_worker=max(1, slabs))
        return options

    def resolve(self, prefix: str, num_workers: int, prefetch_factor: int) -> SlabConfig:
        """The per-loader configuration that workers receive."""
        bound = self.slabs_per_worker or max(4, prefetch_factor + 3)
        budget = None
        if self.max_shm_bytes is not None:
            budget = self.max_shm_bytes // max(1, num_workers)
        return SlabConfig(
            prefix=prefix,
            shm_dir=self.shm_dir,
            slabs_per_worker=bound,
            worker_budget_bytes=budget,
            inline_max_bytes=self.inline_max_bytes,
        )


class SlabConfig(NamedTuple):
    """One loader's resolved slab settings (picklable: sent to spawn/forkserver workers)."""

    prefix: str
    """Name prefix of every slab of this loader: ``conveyor-<main pid>-<token>-``."""
    shm_dir: str
    slabs_per_worker: int
    worker_budget_bytes: int | None
    """Most slab bytes one worker may hold; None: limited by free space only."""
    inline_max_bytes: int
