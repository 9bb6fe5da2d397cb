"""A real local Ray cluster (3 nodes of 1 CPU on this machine) shared by tests/ray_workers.

Starting one takes ~7 s and ~1.4 GB, so the package shares it. Tests mark themselves
``ray`` and ``leaks_owned_by("ray_cluster")``: the leak guard (tests/conftest.py) then
leaves alone the processes that descend from the cluster's own (Ray's idle worker
processes outlive an actor on purpose) and the sockets and event fds of Ray's driver, and
still checks everything else (threads, pipes, files, /dev/shm).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

import sample_datasets

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:  # without the ray extra, the package's tests are not collected
    collect_ignore_glob = ["test_*.py"]

NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
# Ray's failure detection, shortened so that a lost node is noticed in about a second
# (docs/scaling-out.md): the GCS checks every raylet's health every 500 ms.
SYSTEM_CONFIG = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 2,
}


class RayCluster:
    """The running cluster, and what of this process's children and fds belong to it."""

    def __init__(self) -> None:
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                **NODE_ARGS,
                "include_dashboard": False,
                "_system_config": SYSTEM_CONFIG,
            },
        )
        self.cluster.add_node(**NODE_ARGS, resources={"worker_slot": 1})
        # The node test_ray_workers_faults kills. Added now: adding a node after one was removed
        # can hang in Ray's GCS client (seen with ray 2.60.0 here), so no test adds one.
        self.doomed = self.cluster.add_node(**NODE_ARGS, resources={"worker_slot": 1})
        ray.init(address=self.cluster.address, log_to_driver=False)
        for module in (sample_datasets,):
            ray.cloudpickle.register_pickle_by_value(module)
        self._roots = {p.pid for p in psutil.Process().children()}

    def remove_node(self, node: Any) -> None:
        """SIGKILL every process of the node, its workers first, as a crashed machine.

        (Ray's ``remove_node`` alone kills the node's own processes; its worker processes,
        which the driver talks to directly, would go on serving for a while.)
        """
        raylet = node.all_processes["raylet"][0].process.pid
        workers = psutil.Process(raylet).children(recursive=True)
        for process in workers:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(workers, timeout=10)
        self.cluster.remove_node(node, allow_graceful=False)

    # ----- what the leak guard leaves alone
    def owns_process(self, process: psutil.Process) -> bool:
        """Ray's node processes and every process they started (workers, agents)."""
        try:
            chain = [process, *process.parents()]
        except psutil.Error:
            return True  # already gone: Ray reaped it
        return any(p.pid in self._roots for p in chain)

    def owns_thread(self, thread: threading.Thread) -> bool:
        """None: Ray's driver threads start with ``ray.init``, before any test."""
        return False

    def owns_fd(self, target: str) -> bool:
        """Sockets and event-loop fds (epoll, timerfd, eventfd): Ray's driver opens a gRPC
        channel to a node when it first talks to it."""
        return target.startswith(("socket:", "anon_inode:"))

    def close(self) -> None:
        ray.shutdown()
        self.cluster.shutdown()


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[RayCluster]:
    if os.environ.get("RAY_ADDRESS"):
        pytest.skip("RAY_ADDRESS is set: tests/ray_workers start their own local cluster")
    cluster = RayCluster()
    try:
        yield cluster
    finally:
        cluster.close()
