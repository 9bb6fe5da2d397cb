"""A conveyor DataPipe graph loaded by *torch's* DataLoader: it seeds and shards itself.

torch's DataLoader seeds and shards only its own DataPipe class; it treats a conveyor graph
as a plain IterableDataset, so each of its workers would read the whole graph (every item
``num_workers`` times) and each worker's shuffles would draw their own order. So when
``iter()`` starts a pass on the graph a worker of torch's loader iterates (torch's
``get_worker_info().dataset`` is this very pipe, and no conveyor loader drives it), the
graph prepares itself as `conveyor.DataLoader` would prepare it:

- every random node gets a seed from one generator seeded by the epoch's *base seed*
  (``info.seed - info.id``, the same in every worker of an epoch) and the pass number (so
  persistent workers shuffle anew each epoch): all workers agree on one order;
- unless the user applied sharding, the sharding nodes take shard
  ``worker_id * world_size + rank`` of ``num_workers * world_size`` (ranks from
  torch.distributed when it is initialised in the worker, as under fork).

Ranks agree on a shuffle only if their loaders draw the same base seed (the same
``torch.manual_seed`` or ``generator`` on every rank); `conveyor.DataLoader` agrees on a
seed across ranks by itself. With ``num_workers=0`` torch's loader gives no worker info and
the graph is iterated as it is.
"""

from __future__ import annotations

from typing import Any

import torch

from conveyor.datapipes.graph import list_dps, traverse_dps
from conveyor.datapipes.rng import SplitMix64
from conveyor.datapipes.settings import apply_random_seed, apply_sharding, sharding_nodes
from conveyor.distributed import world_and_rank

__all__ = ["prepare_for_torch_worker"]

_PASSES = "_conveyor_torch_passes"  # per-worker pass count, kept on the root pipe
_SHARDED = "_conveyor_torch_sharded"  # set once this module applied the sharding


def prepare_for_torch_worker(root: Any, info: Any) -> None:
    """Seed and shard ``root`` for the torch DataLoader worker described by ``info``."""
    passes = int(root.__dict__.get(_PASSES, 0))
    root.__dict__[_PASSES] = passes + 1
    base_seed = int(info.seed) - int(info.id)
    mixer = SplitMix64(base_seed ^ (passes * 0x9E3779B97F4A7C15))
    seed = mixer.next_u64() & ((1 << 63) - 1)
    apply_random_seed(root, torch.Generator().manual_seed(seed))
    shard_nodes = sharding_nodes(list_dps(traverse_dps(root)))
    if not shard_nodes or (_user_sharded(shard_nodes) and not root.__dict__.get(_SHARDED)):
        return
    world_size, rank = world_and_rank()
    total = int(info.num_workers) * world_size
    if total > 1:
        apply_sharding(root, total, int(info.id) * world_size + rank)
        root.__dict__[_SHARDED] = True


def _user_sharded(nodes: list[Any]) -> bool:
    """Whether some sharding node was already told its shard (then it is left alone)."""
    return any(getattr(node, "groups", None) for node in nodes)
