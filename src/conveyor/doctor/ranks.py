"""The doctor under torch.distributed: the job goes at its slowest rank's pace.

A rank whose own loader keeps up can still be slow: its step waits in collectives for a
rank whose loader does not. Each rank's doctor knows only its own process, so the ranks
exchange their timings and verdicts (``RankCollectives.all_texts``: JSON in tensors over
the process group, never a pickle) and every rank adopts the verdict of the rank that
waited longest for data, with that rank's fix. So every rank runs the same counterfactual
(a step holding collectives must run as often on every rank).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from conveyor.distributed import RankCollectives, world_and_rank
from conveyor.doctor.diagnosis import Diagnosis, Fix
from conveyor.doctor.measure import Measurement
from conveyor.stats.verdict import BOTTLENECK_WAIT_SHARE

__all__ = ["IMBALANCE_RATIO", "across_ranks"]

IMBALANCE_RATIO = 2.0  # a rank waiting this many times longer for data than the least


def across_ranks(diagnosis: Diagnosis, run: Measurement, floor_s: float) -> Diagnosis:
    """``diagnosis`` seen from the whole job: unchanged with one rank."""
    world, rank = world_and_rank()
    if world == 1:
        return diagnosis
    mine = _as_record(rank, diagnosis, run)
    ranks = [json.loads(text) for text in RankCollectives().all_texts(json.dumps(mine))]
    slowest = max(ranks, key=lambda r: (r["wait_s"], -r["rank"]))
    fastest = min(ranks, key=lambda r: r["wait_s"])
    # the whole Fix: a rank whose Fix ran no counterfactual would leave the others waiting
    fix = Fix(**slowest["fix"])
    predicted = max(floor_s, slowest["predicted_s"])
    imbalanced = slowest["wait_s"] >= BOTTLENECK_WAIT_SHARE * slowest["period_s"] and slowest[
        "wait_s"
    ] >= IMBALANCE_RATIO * max(fastest["wait_s"], 1e-4)
    if not imbalanced:
        if slowest["rank"] == rank:
            return diagnosis
        return Diagnosis(diagnosis.bottleneck, diagnosis.evidence, fix, run.period_s, predicted)
    waits = ", ".join(f"rank {r['rank']} {r['wait_s'] * 1e3:.1f} ms" for r in ranks)
    evidence = (
        f"rank {slowest['rank']}'s loader is the bottleneck ({slowest['bottleneck']}: "
        f"{slowest['evidence']}); the other ranks wait for it in every collective of the step. "
        f"Data wait per batch: {waits}"
    )
    fix = dataclasses.replace(fix, description=f"{fix.description} (rank {slowest['rank']}'s fix)")
    return Diagnosis("rank imbalance", evidence, fix, run.period_s, predicted)


def _as_record(rank: int, diagnosis: Diagnosis, run: Measurement) -> dict[str, Any]:
    return {
        "rank": rank,
        "wait_s": run.wait_per_batch_s,
        "period_s": run.period_s,
        "bottleneck": diagnosis.bottleneck,
        "evidence": diagnosis.evidence,
        "fix": dataclasses.asdict(diagnosis.fix),  # every field, as JSON
        "predicted_s": diagnosis.predicted_period_s,
    }
