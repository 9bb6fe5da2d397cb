"""Who am I? ``get_worker_info()`` for process and thread workers."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from conveyor.torch_compat import publish_worker_info, route_thread_worker_info

__all__ = ["WorkerInfo", "WorkerRandom", "get_worker_info"]


class WorkerRandom:
    """Random generators private to one worker, seeded from its ``seed``.

    Thread workers share the process-wide ``random``/torch/NumPy state (reseeding it would
    reseed the main thread too), so they should draw from these instead: no races, and
    the same draws every run for the same loader generator. The NumPy generator is made on
    first use (``numpy.random`` costs a worker ~10 ms to import).
    """

    __slots__ = ("_numpy", "_numpy_state", "random", "torch")

    def __init__(self, rng: random.Random, generator: torch.Generator, numpy_state: Any):
        self.random = rng
        self.torch = generator
        self._numpy_state = numpy_state
        self._numpy: np.random.Generator | None = None

    @property
    def numpy(self) -> np.random.Generator:
        if self._numpy is None:
            self._numpy = np.random.default_rng(self._numpy_state)
        return self._numpy

    # The names of torch's container (``WorkerInfo.rng`` of torch's thread workers).
    @property
    def random_generator(self) -> random.Random:
        return self.random

    @property
    def torch_generator(self) -> torch.Generator:
        return self.torch

    @property
    def numpy_generator(self) -> np.random.Generator:
        return self.numpy

    @classmethod
    def seeded(cls, seed: int, numpy_state: Any) -> WorkerRandom:
        return cls(random.Random(seed), torch.Generator().manual_seed(seed), numpy_state)

    def __repr__(self) -> str:
        return f"WorkerRandom(random={self.random!r}, torch={self.torch!r})"


@dataclass(frozen=True)
class WorkerInfo:
    """Same as `torch.utils.data.WorkerInfo`: id, num_workers, seed and the worker's dataset.

    A frozen dataclass with torch's first five fields in torch's order. ``rng`` holds
    generators private to this worker (see `WorkerRandom`), in process workers too;
    ``worker_type`` is the loader's (``"process"``, ``"thread"`` or ``"ray"``) and
    ``worker_method`` the same in torch's words (``"multiprocessing"`` for processes).

    Attributes:
        id: this worker's id, ``0 <= id < num_workers``.
        num_workers: the loader's worker count.
        seed: this worker's seed (``base_seed + id``), used for ``random``, torch and NumPy.
        dataset: this worker's copy of the dataset (a DataPipe graph: prepared for the worker).
        rng: generators private to this worker (`WorkerRandom`).
        worker_type: ``"process"``, ``"thread"`` or ``"ray"``.
    """

    id: int
    num_workers: int
    seed: int
    dataset: Any
    rng: WorkerRandom | None = None
    worker_type: str = "process"

    @property
    def worker_method(self) -> str:
        return "multiprocessing" if self.worker_type == "process" else self.worker_type


# A process worker sets the process-wide value; a thread worker sets a thread-local one so
# that several thread workers in one process each see their own id.
_process_info: WorkerInfo | None = None
_thread_info = threading.local()


def get_worker_info() -> WorkerInfo | None:
    """Same as `torch.utils.data.get_worker_info`: `WorkerInfo` in a worker, else ``None``."""
    info: WorkerInfo | None = getattr(_thread_info, "info", None)
    return info if info is not None else _process_info


def install_process_worker_info(info: WorkerInfo) -> None:
    """Called once at the start of a worker process, before any user code runs."""
    global _process_info
    _process_info = info
    publish_worker_info(info)


def install_thread_worker_info(info: WorkerInfo) -> None:
    """Called once at the start of a worker thread, before any user code runs."""
    route_thread_worker_info(_thread_worker_info)
    _thread_info.info = info


def _thread_worker_info() -> WorkerInfo | None:
    info: WorkerInfo | None = getattr(_thread_info, "info", None)
    return info


def clear_worker_info() -> None:
    """Called when a thread worker ends (process workers simply exit)."""
    _thread_info.info = None
