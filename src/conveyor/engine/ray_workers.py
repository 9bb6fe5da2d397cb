"""Ray actors as workers (``worker_type="ray"``): the `WorkerKind` strategy over `RayPool`.

An actor is a process of its own, so a worker behaves as a process worker does: it seeds
the process-wide ``random``/torch/NumPy generators, owns its dataset replica by having
unpickled it, and publishes `get_worker_info` process-wide. The actors may run on any node
of the Ray cluster; batches come back through Ray's object store (engine/ray_pool.py).

Ray is optional (``pip install conveyor[ray]``) and imported only when a pool starts, so
``import conveyor`` never imports it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from conveyor.engine.pool import WorkerPool
from conveyor.engine.seeding import seed_process_rngs
from conveyor.engine.worker_info import WorkerInfo, install_process_worker_info
from conveyor.engine.worker_kind import Pin, WorkerOptions, WorkerSetup

__all__ = ["RayWorkers", "actor_options", "check_ray_installed"]

_MISSING_RAY = (
    "worker_type='ray' needs Ray, which is not installed: pip install conveyor[ray] "
    "(or pip install ray==2.60.0)"
)


def check_ray_installed() -> None:
    """Raise a clear ImportError, naming the extra, when Ray cannot be imported."""
    if importlib.util.find_spec("ray") is None:
        raise ImportError(_MISSING_RAY, name="ray")


def _checked_remote_args(remote_args: Mapping[str, Any] | None) -> dict[str, Any]:
    if remote_args is None:
        return {}
    if not isinstance(remote_args, Mapping) or not all(isinstance(k, str) for k in remote_args):
        raise TypeError(
            "ray_remote_args should be None or a dict of keyword arguments for Ray's "
            "actor .options() (num_cpus, resources, scheduling_strategy, ...), but got "
            f"ray_remote_args={remote_args!r}"
        )
    return dict(remote_args)


def _checked_restarts(max_worker_restarts: int | None) -> int | None:
    restarts = max_worker_restarts
    if restarts is None:
        return None
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise ValueError(
            "max_worker_restarts should be None (the default: up to num_workers) or an int "
            ">= 0 (lost ray workers replaced per iterator), but got "
            f"max_worker_restarts={restarts!r}"
        )
    return restarts


def actor_options(remote_args: Mapping[str, Any]) -> dict[str, Any]:
    """The actors' ``.options()``: the user's, with Ray's ``"SPREAD"`` scheduling unless
    they chose a strategy, so that a lost node takes as few workers with it as it can."""
    options = dict(remote_args)
    options.setdefault("scheduling_strategy", "SPREAD")
    return options


class RayWorkers:
    """Worker actors on the process's Ray cluster (``ray.init()`` if not connected yet).

    Args:
        remote_args: keyword arguments for the actors' ``.options()`` (``num_cpus``,
            ``resources``, ``scheduling_strategy``, ...), as Ray Data's ``ray_remote_args``.
            Without a ``scheduling_strategy`` the actors are spread over the nodes
            (``"SPREAD"``).
        max_worker_restarts: lost actors replaced by new ones, per iterator, while the
            cluster has room for one (default None: up to ``num_workers``); once spent, or
            with no room, a lost worker's tasks go to the surviving workers (map-style
            datasets) and a lost stream is an error.
    """

    name = "ray"
    private_copies = False

    def __init__(
        self, remote_args: Mapping[str, Any] | None = None, max_worker_restarts: int | None = None
    ) -> None:
        self.remote_args = _checked_remote_args(remote_args)
        self.max_worker_restarts = _checked_restarts(max_worker_restarts)
        check_ray_installed()

    def __reduce__(self) -> tuple[type[RayWorkers], tuple[dict[str, Any], int | None]]:
        return (RayWorkers, (self.remote_args, self.max_worker_restarts))

    # ----- in the main process
    def check_count(self, num_workers: int) -> None:
        """The actors use the cluster's CPUs, not this machine's: nothing to warn about."""

    def check_start(self, dataset: Any, options: WorkerOptions) -> None:
        """Nothing to warn about: the dataset is pickled to every actor anyway."""

    def warm_up(self, options: WorkerOptions, dataset: Any = None) -> None:
        """Actors belong to an iterator (they get its set-up): nothing to prepare."""

    def start_pool(self, setup: WorkerSetup, pin: Pin | None) -> tuple[WorkerPool, Pin | None]:
        from conveyor.engine.ray_pool import RayPool  # imports ray

        restarts = self.max_worker_restarts
        if restarts is None:
            restarts = setup.workers.num_workers
        pool = RayPool(setup, actor_options(self.remote_args), restarts)
        return pool, pin  # the iterator pins on the trainer as it hands batches out

    def close(self) -> None:
        """Nothing outlives an iterator: its pool owns the actors."""

    # ----- in a worker (an actor's process)
    def seed(self, base_seed: int, worker_id: int) -> int:
        return seed_process_rngs(base_seed, worker_id)

    def own_dataset(self, dataset: Any) -> Any:
        return dataset  # unpickled in the actor: its own copy already

    def publish(self, info: WorkerInfo) -> None:
        install_process_worker_info(info)
