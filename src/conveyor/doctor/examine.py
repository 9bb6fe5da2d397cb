"""``loader.doctor()``: measure, replay for headspace, diagnose, then try the fix."""

from __future__ import annotations

import contextlib
import gc
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from conveyor.distributed import RankCollectives, world_and_rank
from conveyor.doctor.containers import large_containers
from conveyor.doctor.diagnosis import Fix, LoaderFacts, crop_aware, diagnose
from conveyor.doctor.hotspots import profile_samples
from conveyor.doctor.measure import Measurement, Step, headspace, measure
from conveyor.doctor.memory import GROWTH_MIN_BYTES, MemoryFinding, copy_on_read
from conveyor.doctor.ranks import across_ranks
from conveyor.doctor.report import Counterfactual, DoctorReport, MemoryCounterfactual
from conveyor.engine.loop.autotune import available_cpus
from conveyor.string_table import StringTable

__all__ = ["DOCTOR_BOUND_S", "examine"]

DOCTOR_BOUND_S = 60.0  # the doctor's runs together: a memory counterfactual fits within it


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
    memory = _copy_on_read(loader, run, facts)
    memory_after = None
    if counterfactual and memory is not None:
        left = min(max_seconds, DOCTOR_BOUND_S - 5.0 - (time.perf_counter() - started))
        memory_after = _try_memory(loader, memory, step, run.stats.batches, left)
    duration = time.perf_counter() - started
    return DoctorReport(facts, run, floor, diagnosis, after, duration, memory, memory_after)


def _try(loader: Any, fix: Fix, step: Step, batches: int, max_seconds: float) -> Counterfactual:
    """The same measurement on a copy of ``loader`` with ``fix`` applied."""
    with warnings.catch_warnings():
        # the fix may ask for more process workers than CPUs on purpose (waiting workers)
        warnings.simplefilter("ignore", UserWarning)
        variant = loader._conveyor_variant(**fix.changes)
        with _gc_frozen(fix.gc_freeze), _environ(fix.environ), _read_ahead(fix.read_ahead):
            on_start = _send_read_ahead(fix.read_ahead) if fix.read_ahead else None
            run, _ = measure(variant, step, batches, max_seconds, on_start)
    return Counterfactual(run, run.period_s)


@contextlib.contextmanager
def _read_ahead(blocks: int) -> Iterator[None]:
    """Every remote reader of this process (thread workers') and of workers forked from
    it keeps ``blocks`` requested ahead, as autotune's floor does; then as before."""
    if not blocks:
        yield
        return
    from conveyor.storage.read_window import set_read_ahead_floor  # remote reads ran

    before = set_read_ahead_floor(blocks)
    try:
        yield
    finally:
        set_read_ahead_floor(*before)


def _send_read_ahead(blocks: int) -> Callable[[Any], None]:
    """Workers not forked from this process (spawn, forkserver) get the floor as autotune
    sends it, a `Tuning` message (from their first tasks after the ones dealt at start)."""

    def send(iterator: Any) -> None:
        send_to_workers = getattr(iterator, "_send_read_ahead", None)
        if send_to_workers is not None:
            send_to_workers(blocks)

    return send


def _copy_on_read(loader: Any, run: Measurement, facts: LoaderFacts) -> MemoryFinding | None:
    """Process workers that grew: the dataset's large container to blame, if any."""
    if facts.worker_type != "process" or run.worker_growth_bytes < GROWTH_MIN_BYTES:
        return None
    kind = getattr(getattr(loader, "_conveyor_options", None), "workers", None)
    shared = getattr(getattr(kind, "kind", None), "shared_record_paths", ())
    try:
        containers = large_containers(loader.dataset, shared)
    except Exception:  # the doctor's look must not fail the user's run
        return None
    return copy_on_read(run, facts, containers, bool(getattr(loader, "share_records", False)))


def _try_memory(
    loader: Any, finding: MemoryFinding, step: Step, batches: int, max_seconds: float
) -> MemoryCounterfactual:
    """The measured run again with the container as a `StringTable` (then restored)."""
    if not finding.replace_with_table:
        return MemoryCounterfactual(None, "the doctor does not rewrite a dataset's records")
    if world_and_rank()[0] > 1:  # a step holding collectives: every rank would have to run it
        return MemoryCounterfactual(None, "not run under torch.distributed (ranks differ)")
    if "[" in finding.attribute:
        return MemoryCounterfactual(None, "the attribute is inside a list of datasets")
    if max_seconds < 2.0:
        return MemoryCounterfactual(None, f"no time left within {DOCTOR_BOUND_S:.0f} s")
    *path, name = finding.attribute.split(".")
    owner = loader.dataset
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    note = f"dataset.{finding.attribute} as a StringTable for this run, then restored"
    try:
        setattr(owner, name, StringTable(original))
        run, _ = measure(loader._conveyor_variant(), step, batches, max_seconds)
    except Exception as error:  # the dataset may need its list (append, isinstance)
        return MemoryCounterfactual(None, f"the run with a StringTable failed: {error!r}")
    finally:
        setattr(owner, name, original)
    growth = run.worker_growth_bytes if run.worker_memory else None
    return MemoryCounterfactual(growth, note)


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
