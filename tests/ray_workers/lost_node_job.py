"""Run as a script (tests/ray_workers/test_ray_defaults.py): a lost node with default arguments.

A Ray cluster of its own on 127.0.0.1 (the package's shared one cannot gain nodes after it
lost one): a head without CPUs and two worker nodes of 8 CPUs each, room for twice the
workers. Two loaders with ``worker_type="ray"``, 4 workers and *no* Ray arguments, one over
a map-style dataset and one over a stream, take two batches or more each (until every
actor has started, so that its node is known); then the node running
worker 0 of the stream loader dies (every process of it SIGKILLed, as a crashed machine),
and both finish their epoch. argv: OUT; writes JSON with the batches, torch's, the nodes
each loader's actors ran on and the workers lost.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import psutil  # noqa: E402
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import conveyor  # noqa: E402

import sample_datasets  # noqa: E402
from torch_oracle import torch_batches  # noqa: E402

NODE = {"num_cpus": 8, "object_store_memory": 80 * 2**20}
SYSTEM_CONFIG = {  # a lost node noticed in about a second (as tests/ray_workers/conftest.py)
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 2,
}


class Slow(sample_datasets.Range):
    """Samples that take a while (their cost), so the lost workers have tasks in flight."""

    def __getitem__(self, index: int) -> int:
        time.sleep(0.01)
        return super().__getitem__(index)


def kill_node(cluster: Cluster, node: Any) -> None:
    raylet = node.all_processes["raylet"][0].process.pid
    workers = psutil.Process(raylet).children(recursive=True)
    for process in workers:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(workers, timeout=10)
    cluster.remove_node(node, allow_graceful=False)


def main() -> None:
    out = Path(sys.argv[1])
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "object_store_memory": 80 * 2**20,
            "include_dashboard": False,
            "_system_config": SYSTEM_CONFIG,
        },
    )
    try:
        nodes = [cluster.add_node(**NODE) for _ in range(2)]
        ray.init(address=cluster.address, log_to_driver=False)
        ray.cloudpickle.register_pickle_by_value(sample_datasets)
        out.write_text(json.dumps(run(cluster, nodes)))
    finally:
        ray.shutdown()
        cluster.shutdown()


def run(cluster: Cluster, nodes: list[Any]) -> dict[str, Any]:
    datasets = {"map": Slow(48), "stream": sample_datasets.ShardedStream(0, 48)}
    options: dict[str, Any] = {"batch_size": 3, "num_workers": 4}
    iterators = {
        name: iter(conveyor.DataLoader(dataset, worker_type="ray", **options))
        for name, dataset in datasets.items()
    }
    pools = {name: it._pool for name, it in iterators.items()}
    heads: dict[str, list[Any]] = {name: [] for name in iterators}
    for name, iterator in iterators.items():  # until every actor said where it runs
        while len(heads[name]) < 2 or any(a.node_id == "?" for a in pools[name]._actors):
            heads[name].append(next(iterator).tolist())
    spread = {name: sorted({a.node_id for a in pool._actors}) for name, pool in pools.items()}
    doomed_id = pools["stream"]._actors[0].node_id
    kill_node(cluster, next(node for node in nodes if node.node_id == doomed_id))
    result: dict[str, Any] = {"spread": spread, "doomed": doomed_id}
    for name, iterator in iterators.items():
        rest = [batch.tolist() for batch in iterator]
        result[name] = {
            "batches": heads[name] + rest,
            "expected": [b.tolist() for b in torch_batches(datasets[name], **options)],
            "lost": pools[name].lost_workers,
        }
    return result


if __name__ == "__main__":
    main()
