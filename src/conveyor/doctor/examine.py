"""``loader.doctor()``: measure, replay for headspace, diagnose, then try the fix."""

from __future__ import annotations

import contextlib
import gc
import os
import time
import warnings
from collections.abc import Iterator
from typing import Any

from conveyor.distributed import RankCollectives
from conveyor.doctor.diagnosis import Fix, LoaderFacts, crop_aware, diagnose
from conveyor.doctor.hotspots import profile_samples
from conveyor.doctor.measure import Step, headspace, measure
from conveyor.doctor.ranks import across_ranks
from conveyor.doctor.report import Counterfactual, DoctorReport
from conveyor.engine.loop.autotune import available_cpus

__all__ = ["examine"]


def examine(
    loader: Any,
    step: Step | None = None,
    batches: int = 48,
    counterfactual: bool = True,
    max_seconds: float = 20.0,
) -> DoctorReport:
    """See ``DataLoader.doctor``."""
    if batches < 4:
        raise ValueError(f"doctor needs batches >= 4 to measure a steady state, got {batches}")
    started = time.perf_counter()
    step = step if step is not None else _step_like_last_epoch(loader)
    run, kept = measure(loader, step, batches, max_seconds)
    RankCollectives().all_have(True)  # ranks replay together: no step waits for a loader
    floor = headspace(step, kept)
    del kept
    facts = LoaderFacts(
        num_workers=loader.num_workers,
        worker_type=getattr(loader, "worker_type", "process"),
        in_order=loader.in_order,
        prefetch_factor=loader.prefetch_factor,
        cpus=available_cpus(),
    )
    diagnosis = diagnose(run, floor, facts)
    if diagnosis.bottleneck.startswith("worker CPU"):
        hotspots = profile_samples(loader.dataset)
        if hotspots is not None and hotspots.wants_crop_aware_decode:
            diagnosis = crop_aware(diagnosis, hotspots.full_decode_share)
    diagnosis = across_ranks(diagnosis, run, floor)
    after = None
    if counterfactual and diagnosis.fix.applicable:
        after = _try(loader, diagnosis.fix, step, batches, max_seconds)
    return DoctorReport(facts, run, floor, diagnosis, after, time.perf_counter() - started)


def _try(loader: Any, fix: Fix, step: Step, batches: int, max_seconds: float) -> Counterfactual:
    """The same measurement on a copy of ``loader`` with ``fix`` applied."""
    with warnings.catch_warnings():
        # the fix may ask for more process workers than CPUs on purpose (waiting workers)
        warnings.simplefilter("ignore", UserWarning)
        variant = loader._conveyor_variant(**fix.changes)
        with _gc_frozen(fix.gc_freeze), _environ(fix.environ):
            run, _ = measure(variant, step, batches, max_seconds)
    return Counterfactual(run, run.period_s)


@contextlib.contextmanager
def _gc_frozen(freeze: bool) -> Iterator[None]:
    if not freeze:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def _environ(changes: dict[str, str | None]) -> Iterator[None]:
    """Environment variables changed (None: unset) for the counterfactual run only."""
    before = {name: os.environ.get(name) for name in changes}
    for name, value in changes.items():
        _set_env(name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            _set_env(name, value)


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _step_like_last_epoch(loader: Any) -> Step:
    """No step given: block for as long as the last epoch's step took (none: no step)."""
    stats = loader.stats()
    seconds = stats.compute_s / stats.batches if stats.batches > 1 else 0.0

    def step(batch: Any) -> None:
        if seconds:
            time.sleep(seconds)  # a step that blocks (a GPU's), as the last epoch's did

    return step
