"""Resuming a map-style epoch with a different number of ranks (DistributedSampler).

Each rank's checkpoint says how many batches it received. Ranks of a DDP job run in
step, so together they consumed ``batches x batch size x world size`` leading positions
of the epoch's global order; the resumed job deals out the rest among its own ranks.
"""

from __future__ import annotations

from typing import Any, TypedDict

from conveyor.distributed import DistributedSampler
from conveyor.state.loader_state import Resume


class ReplicaState(TypedDict):
    num_replicas: int
    epoch: int
    per_request: int  # samples per index request (batch size, or 1)
    consumed_before: int  # global positions dealt out before this iteration began


def distributed_sampler(index_sampler: Any) -> DistributedSampler[Any] | None:
    for candidate in (index_sampler, getattr(index_sampler, "sampler", None)):
        if isinstance(candidate, DistributedSampler):
            return candidate
    return None


def apply_replica_resume(
    sampler: DistributedSampler[Any] | None, resume: Resume, per_request: int
) -> tuple[int, bool]:
    """Before ``iter(sampler)``: returns (consumed_before, whether to skip delivered batches).

    Same world size and batch size: the iteration is replayed and the delivered batches
    skipped. Another world size or batch size (``per_request``: samples per request now):
    the sampler deals out only what no rank had consumed, nothing to skip.
    """
    saved: ReplicaState | None = resume.state.get("replicas")
    if sampler is None or saved is None:
        return 0, True
    sampler.set_epoch(saved["epoch"])
    before = saved["consumed_before"]
    same_batches = saved["per_request"] == per_request
    if saved["num_replicas"] == sampler.num_replicas and same_batches:
        if before:
            sampler.resume_after(before)
        return before, True
    consumed = before + resume.yielded * saved["per_request"] * saved["num_replicas"]
    sampler.resume_after(consumed)
    return consumed, False


def replica_state(
    sampler: DistributedSampler[Any] | None, per_request: int, consumed_before: int
) -> ReplicaState | None:
    if sampler is None:
        return None
    return {
        "num_replicas": sampler.num_replicas,
        "epoch": sampler.epoch,
        "per_request": per_request,
        "consumed_before": consumed_before,
    }
