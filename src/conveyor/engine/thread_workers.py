"""Worker threads: the `WorkerKind` strategy over `ThreadPool`.

Threads share the process: each worker gets a shallow copy of the dataset (and its own
copy of a DataPipe graph), seeds only its private generators (``WorkerInfo.rng``; the
global ones belong to the main thread too), sees its own `get_worker_info` through a
thread-local, and batches are pinned by the iterator itself (no transfer to overlap).
"""

from __future__ import annotations

import copy
from typing import Any

from conveyor.engine.pool import WorkerPool
from conveyor.engine.thread_pool import ThreadPool
from conveyor.engine.worker_info import WorkerInfo, install_thread_worker_info
from conveyor.engine.worker_kind import Pin, WorkerOptions, WorkerSetup

__all__ = ["ThreadWorkers"]


class ThreadWorkers:
    """Worker threads of this process: no start-up cost, batches passed by reference."""

    name = "thread"
    private_copies = True

    # ----- in the main process
    def check_count(self, num_workers: int) -> None:
        """Threads cost no CPU each: any number is fine."""

    def check_start(self, dataset: Any, options: WorkerOptions) -> None:
        """Nothing to warn about."""

    def warm_up(self, options: WorkerOptions, dataset: Any = None) -> None:
        """Threads start in microseconds: nothing to prepare."""

    def start_pool(self, setup: WorkerSetup, pin: Pin | None) -> tuple[WorkerPool, Pin | None]:
        return ThreadPool(setup), pin  # the iterator pins as it hands batches out

    def close(self) -> None:
        """Nothing outlives an iterator."""

    # ----- in a worker
    def seed(self, base_seed: int, worker_id: int) -> int:
        return base_seed + worker_id  # global RNGs are shared: see docs/design/shutdown.md

    def own_dataset(self, dataset: Any) -> Any:
        """A shallow copy, as a process worker has its own object.

        Attributes set per worker (the ``worker_init_fn`` pattern of torch's docs) stay per
        worker; the data the attributes point to (arrays, lists) is shared, not copied.
        """
        try:
            return copy.copy(dataset)
        except Exception:
            return dataset

    def publish(self, info: WorkerInfo) -> None:
        install_thread_worker_info(info)
