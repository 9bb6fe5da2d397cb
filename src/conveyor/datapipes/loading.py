"""How a DataLoader prepares a DataPipe graph for one worker on one rank.

Every worker of every rank receives the same graph and the same shared seed, so random
nodes (shuffles) agree on one order; then sharding keeps the worker's part of it. The
split follows torch: worker ``w`` of rank ``r`` gets shard ``w * world_size + r`` of
``num_workers * world_size``. torch's own DataPipe graphs are prepared the same way, so they
load as torch's DataLoader loads them (same seeds, same shards), with conveyor's code.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable
from typing import Any

import torch

from conveyor.datapipes.base import IterDataPipe
from conveyor.datapipes.graph import is_any_datapipe, list_dps, traverse_dps
from conveyor.datapipes.settings import apply_random_seed, apply_sharding, has_sharding


def warn_if_unsharded(datapipe: IterDataPipe[Any], consumers: int) -> None:
    """Every worker and rank would read the whole graph: say how to split it."""
    if consumers > 1 and not has_sharding(datapipe):
        warnings.warn(
            f"this DataPipe graph has no sharding node, so each of its {consumers} consumers "
            "(workers x ranks) reads all of it and every item is loaded that many times. "
            "Add .sharding_filter() (after shuffle) where the stream should be split.",
            UserWarning,
            stacklevel=4,
        )


def _listing_nodes(datapipe: Any) -> list[Any]:
    """Nodes that list a glob (`ShardLister`), in graph order: the same on every rank."""
    pipes = list_dps(traverse_dps(datapipe))
    return [dp for dp in pipes if callable(getattr(type(dp), "adopt_listing", None))]


def list_once(datapipe: Any, share: Callable[[str], str] | None = None) -> int:
    """List every glob of the graph here, once, and keep the result in its node, so that
    the workers (which get the graph after this) never list; returns the nodes listed.

    ``share`` sends rank 0's text to every rank (a collective: every rank calls it, in the
    same order, with the same graph): rank 0 lists and the others adopt its listing, so a
    job lists once whatever its ranks and workers. A node that has its listing already
    keeps it (one listing per job, not per epoch).
    """
    listers = _listing_nodes(datapipe)
    for lister in listers:  # drivers imported once here, not by every worker after fork
        prepare = getattr(lister, "prepare_remote", None)
        if callable(prepare):
            prepare()
    nodes = [node for node in listers if node.listing_wanted()]
    if not nodes:
        return 0
    if share is None:
        for node in nodes:
            node.list_now()
        return len(nodes)
    listings = [node.list_now() for node in nodes] if _is_rank_zero() else []
    received = json.loads(share(json.dumps(listings)))
    for node, urls in zip(nodes, received, strict=True):
        node.adopt_listing(urls)
    return len(nodes)


def _is_rank_zero() -> bool:
    from conveyor.distributed import world_and_rank

    return world_and_rank()[1] == 0


def prepare_graph(
    dataset: Any,
    worker_id: int,
    num_workers: int,
    shared_seed: int | None,
    *,
    world_size: int = 1,
    rank: int = 0,
    private_copy: bool = False,
) -> Any:
    """Seed and shard ``dataset`` for one consumer; returns the graph to iterate.

    ``private_copy`` gives the consumer its own graph (thread workers share one process,
    and sharding mutates nodes). Module-level so that spawn can pickle it.
    """
    if not is_any_datapipe(dataset):
        return dataset
    if private_copy:
        dataset = copy.deepcopy(dataset)
    if shared_seed is not None:
        apply_random_seed(dataset, torch.Generator().manual_seed(shared_seed))
    total = num_workers * world_size
    if total > 1:
        apply_sharding(dataset, total, worker_id * world_size + rank)
    return dataset
