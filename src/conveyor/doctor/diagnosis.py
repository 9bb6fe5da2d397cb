"""From a measured run to a verdict: the bottleneck, the top fix and its predicted gain.

Pure (no loaders run here), so every rule is unit-testable. The model: in steady state
one batch takes ``period = max(step floor, loader period)``; the loader's period with
``n`` workers is ``max(busy per batch / n, worker CPU per batch / CPUs free)`` plus what
the main process spends per batch (receiving, GC). A fix changes one term; the predicted
gain is the measured period over the predicted one, minus one.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

from conveyor.doctor.measure import Measurement
from conveyor.engine.loop.autotune_options import WIDEST_READ_AHEAD
from conveyor.stats.verdict import (
    BOTTLENECK_WAIT_SHARE,
    CPU_SHARE,
    PIN_BUSY_SHARE,
    STRAGGLER_RATIO,
)
from conveyor.transport.options import ENV_SHM_MAX_BYTES

__all__ = ["Diagnosis", "Fix", "LoaderFacts", "diagnose"]

GIL_CORES = 1.3  # thread workers together on a CPU no more than this: the GIL holds them
READ_AHEAD_FIX = WIDEST_READ_AHEAD  # blocks: the remote read-ahead the doctor advises
REMOTE_WAIT_SHARE = 0.5  # readers' waits this share of the workers' off-CPU time: remote reads


@dataclass(frozen=True)
class LoaderFacts:
    """What the doctor reads off the loader (its public attributes) and the machine."""

    num_workers: int
    worker_type: str
    in_order: bool
    prefetch_factor: int | None
    cpus: int


@dataclass(frozen=True)
class Fix:
    """A change the counterfactual run can apply: loader attributes, or GC settings."""

    description: str
    changes: dict[str, Any] = field(default_factory=dict)  # loader attribute -> value
    gc_freeze: bool = False  # gc.freeze() before the run (the heap stops being scanned)
    environ: dict[str, str | None] = field(default_factory=dict)  # None: unset it
    read_ahead: int = 0  # blocks every remote reader keeps requested ahead (autotune's floor)

    @property
    def applicable(self) -> bool:
        return bool(self.changes) or self.gc_freeze or bool(self.environ) or self.read_ahead > 0


@dataclass(frozen=True)
class Diagnosis:
    """The verdict: ``bottleneck`` (a short name), why, the top fix and the period the
    model predicts with it (``predicted_period_s``; the measured one if no fix)."""

    bottleneck: str
    evidence: str
    fix: Fix
    period_s: float
    predicted_period_s: float

    @property
    def predicted_gain(self) -> float:
        """Throughput gain the fix should bring (0.25: 25 % more batches per second)."""
        return self.period_s / self.predicted_period_s - 1 if self.predicted_period_s else 0.0


def diagnose(run: Measurement, floor_s: float, facts: LoaderFacts) -> Diagnosis:
    """The bottleneck of ``run`` (its consumer's floor ``floor_s`` per batch) and its fix."""
    stats, period = run.stats, run.period_s
    # what the loader costs the loop: its wait in next() and what it slows the step by
    excess = period - floor_s
    gil = facts.worker_type == "thread" and facts.num_workers > 0 and _gil_bound(run, facts)
    gc_bound = run.gc_pause_s >= 0.3 * excess * run.batches
    # a step slower than its floor with little wait in next() is the machine's noise, not
    # the loader's, unless thread workers hold the GIL the step needs or GC pauses it
    if excess <= BOTTLENECK_WAIT_SHARE * period or (
        stats.wait_share <= BOTTLENECK_WAIT_SHARE and not gil and not gc_bound
    ):
        evidence = (
            f"one batch every {period * 1e3:.1f} ms against {floor_s * 1e3:.1f} ms for the step "
            f"alone (headspace); the loop waited for data {stats.wait_share:.0%} of its time"
        )
        keeps_up = Fix("none: the loader keeps up")
        return Diagnosis("training step", evidence, keeps_up, period, period)
    early = (
        _no_workers(run, floor_s, facts)
        if facts.num_workers == 0
        else _between_workers_and_loop(run, floor_s, facts)
    )
    if early is not None:
        return early
    if gc_bound:
        return _gc(run, floor_s)
    if gil:
        return _gil(run, floor_s, facts)
    workers = stats.workers
    busy_s = sum(w.busy_s for w in workers)
    tasks = max(1, sum(w.batches for w in workers))
    busy, cpu = busy_s / tasks, sum(w.cpu_s for w in workers) / tasks
    collate = sum(w.collate_s for w in workers) / tasks
    longest = max((w.longest_s for w in workers), default=0.0)
    # off a CPU: waiting for one (runnable, the machine is short) or on I/O
    queued = run.cpu_queue_s / tasks
    waiting = cpu < CPU_SHARE * busy and queued < 0.5 * (busy - cpu)
    # remote reads before the slow samples: a shard's first read is one of them
    named = _remote_reads(run, floor_s, facts, busy) if waiting else None
    named = named or _held_back(run, floor_s, facts, busy, longest)
    if named is not None:
        return named
    if waiting:
        return _waiting_workers(run, floor_s, facts, busy)
    return _cpu_workers(run, floor_s, facts, busy, cpu, collate)


def _held_back(
    run: Measurement, floor_s: float, facts: LoaderFacts, busy: float, longest: float
) -> Diagnosis | None:
    """Batches ready yet the loop waits: behind a slow one (in order), or in the main
    process receiving them."""
    stats = run.stats
    held = stats.mean_held_while_waiting  # later batches ready while the loop waited
    if facts.in_order and held >= 1 and longest >= STRAGGLER_RATIO * busy > 0:
        return _straggler(run, floor_s, facts, busy, longest)
    if stats.ready_share >= 0.8 and stats.workers_busy_share < 0.6:
        return _main_process(run, floor_s, facts)
    return None


def _between_workers_and_loop(
    run: Measurement, floor_s: float, facts: LoaderFacts
) -> Diagnosis | None:
    """The stages between the workers and the loop: the pin stage, shared memory."""
    if run.pin_per_batch_s >= PIN_BUSY_SHARE * run.period_s:
        return _pin_stage(run, floor_s, facts)
    if run.shm_note is not None:
        return _shared_memory(run, floor_s, facts)
    return None


def _predicted(floor_s: float, loader_s: float) -> float:
    return max(floor_s, loader_s)


def _no_workers(run: Measurement, floor_s: float, facts: LoaderFacts) -> Diagnosis:
    load = run.wait_per_batch_s  # loading happens inside next()
    workers = max(1, min(facts.cpus, math.ceil(load * 1.2 / max(floor_s, 1e-6))))
    predicted = _predicted(floor_s, max(load / workers, load / max(1, facts.cpus - 1)))
    evidence = f"loading takes {load * 1e3:.1f} ms per batch inside next(), in the loop's process"
    fix = Fix(f"num_workers={workers}", {"num_workers": workers})
    return Diagnosis("loading in the training loop", evidence, fix, run.period_s, predicted)


def _worker_period(run: Measurement, facts: LoaderFacts, sending_stays: bool) -> float:
    """The workers' own pace once a stage after them is gone: their busy time per batch
    (its CPU part at the CPU share the scheduler gives them), shared between them. Their
    CPU beyond the busy time is sending batches: it stays unless the fix changes how
    batches travel (``sending_stays``)."""
    workers = run.stats.workers
    tasks = max(1, sum(w.batches for w in workers))
    busy = sum(w.busy_s for w in workers) / tasks
    cpu = sum(w.cpu_s for w in workers) / tasks
    if sending_stays:
        busy = max(busy, cpu)
    else:
        cpu = min(busy, cpu)
    return _cpu_bound_period(run, facts, busy, cpu, max(1, facts.num_workers))


def _pin_stage(run: Measurement, floor_s: float, facts: LoaderFacts) -> Diagnosis:
    pin = run.pin_per_batch_s
    where = "the pin thread" if facts.worker_type == "process" else "next() (thread workers)"
    evidence = (
        f"pinning takes {pin * 1e3:.1f} ms per batch in {where}, one batch every "
        f"{run.period_s * 1e3:.1f} ms: one thread pins every batch, in turn"
    )
    fix = Fix(
        "pin_memory=False measures what the pin stage costs; to keep pinned batches, move "
        "work out of pin_memory() (a custom type's: into collate_fn, in the workers) or pin "
        "less (uint8 before float; on CUDA, process workers write tensors into pinned slabs)",
        {"pin_memory": False},
    )
    # without it the loop's thread receives the batches the pin thread received
    stats = run.stats
    receive = stats.pin_receive_cpu_s / stats.pins if stats.pins else 0.0
    loop_share = cores_for_workers(run, facts, 1)  # the loop's thread: one more to run
    predicted = max(
        floor_s + receive / min(1.0, loop_share), _worker_period(run, facts, sending_stays=True)
    )
    return Diagnosis("pin thread", evidence, fix, run.period_s, predicted)


def _shared_memory(run: Measurement, floor_s: float, facts: LoaderFacts) -> Diagnosis:
    stats = run.stats
    evidence = (
        f"shared memory is too scarce for the batches ({run.shm_note}),"
        f" so {stats.bytes_moved / max(1, stats.batches) / 1e6:.1f} MB a batch are pickled "
        "through the worker pipes and copied again in the main process"
    )
    environ: dict[str, str | None] = {}
    if ENV_SHM_MAX_BYTES in os.environ:
        environ[ENV_SHM_MAX_BYTES] = None  # the cap is conveyor's: lift it
        what = f"lift {ENV_SHM_MAX_BYTES}={os.environ[ENV_SHM_MAX_BYTES]}"
    else:
        what = "give the process more shared memory (docker run --shm-size=8g)"
    fix = Fix(f"{what}: batches then travel in shared-memory slabs", {}, environ=environ)
    predicted = _predicted(floor_s, _worker_period(run, facts, sending_stays=False))
    return Diagnosis("shared memory", evidence, fix, run.period_s, predicted)


def _gc(run: Measurement, floor_s: float) -> Diagnosis:
    gap = run.period_s - floor_s
    evidence = (
        f"{run.gc_collections} garbage collections paused the process "
        f"{run.gc_per_batch_s * 1e3:.1f} ms per batch, of the {gap * 1e3:.1f} ms by which a "
        "batch takes longer than the step alone (large heaps of live objects scanned again)"
    )
    predicted = max(floor_s, run.period_s - run.gc_per_batch_s)
    fix = Fix("gc.freeze() once the dataset is built (the heap is not scanned again)", {}, True)
    return Diagnosis("GC pauses", evidence, fix, run.period_s, predicted)


def _straggler(
    run: Measurement, floor_s: float, facts: LoaderFacts, busy: float, longest: float
) -> Diagnosis:
    evidence = (
        f"some batches take {longest * 1e3:.0f} ms against {busy * 1e3:.1f} ms on average; "
        f"while the loop waited, {run.stats.mean_held_while_waiting:.1f} later batches were "
        "ready behind the slow one (in order)"
    )
    predicted = _predicted(floor_s, busy / facts.num_workers)
    fix = Fix("in_order=False (ready batches first; the order changes)", {"in_order": False})
    return Diagnosis("slow samples", evidence, fix, run.period_s, predicted)


def _main_process(run: Measurement, floor_s: float, facts: LoaderFacts) -> Diagnosis:
    stats = run.stats
    evidence = (
        f"{stats.ready_share:.0%} of batches were ready when asked and the workers busy "
        f"{stats.workers_busy_share:.0%}, yet next() took {run.wait_per_batch_s * 1e3:.1f} ms: "
        "the main process receiving batches (unpickling, copying) is the cost"
    )
    if facts.worker_type == "process":
        predicted = _predicted(floor_s, run.period_s - run.wait_per_batch_s)
        fix = Fix(
            "worker_type='thread' (batches not pickled across processes)", {"worker_type": "thread"}
        )
    else:
        predicted, fix = run.period_s, Fix("make batches cheaper to hand over (fewer objects)")
    return Diagnosis("main process (transport)", evidence, fix, run.period_s, predicted)


def _gil_bound(run: Measurement, facts: LoaderFacts) -> bool:
    """Thread workers busy and on a CPU for much of it (not waiting on I/O), the whole
    process no more than about one core's worth: they take turns holding the GIL."""
    if facts.num_workers < 2 or facts.cpus < 2 or run.wall_s <= 0:
        return False
    workers = run.stats.workers
    busy_s = sum(w.busy_s for w in workers)
    busy_share = busy_s / (len(workers) * run.wall_s) if workers else 0.0
    cpu_s = sum(w.cpu_s for w in workers)
    on_cpu = cpu_s / busy_s if busy_s > 0 else 0.0
    # busy, on a CPU for part of it (a tenth: a loaded machine shares its CPUs too) and a
    # fifth of a core together (waiting on I/O they use next to none), yet the process
    # under ~1 core
    return (
        busy_share >= 0.3
        and on_cpu >= 0.1
        and cpu_s >= 0.2 * run.wall_s
        and run.main_cpu_s < GIL_CORES * run.wall_s
    )


def _gil(run: Measurement, floor_s: float, facts: LoaderFacts) -> Diagnosis:
    workers = min(facts.num_workers, facts.cpus)
    stats = run.stats
    tasks = max(1, sum(w.batches for w in stats.workers))
    cpu = sum(w.cpu_s for w in stats.workers) / tasks
    slowed = run.step_per_batch_s - floor_s
    evidence = (
        f"{facts.num_workers} thread workers on a CPU {cpu * 1e3:.1f} ms per batch, the "
        f"process {run.main_cpu_s / run.wall_s:.1f} cores' worth: Python code holds the GIL"
        f" (it also slows the step by {max(0.0, slowed) * 1e3:.1f} ms a batch)"
    )
    # in processes each batch costs its CPU time, spread over the workers and the CPUs
    predicted = _predicted(
        floor_s, max(cpu / workers, cpu / cores_for_workers(run, facts, workers))
    )
    changes = {"worker_type": "process", "num_workers": workers}
    fix = Fix(f"worker_type='process', num_workers={workers}", changes)
    return Diagnosis("GIL (thread workers)", evidence, fix, run.period_s, predicted)


def _waiting_workers(
    run: Measurement, floor_s: float, facts: LoaderFacts, busy: float
) -> Diagnosis:
    changes = _more_waiting_workers(busy, floor_s, facts)
    workers = changes["num_workers"]
    evidence = (
        f"workers busy {busy * 1e3:.1f} ms per batch, mostly off a CPU (waiting on I/O "
        "latency): more of them cost little CPU"
    )
    predicted = _predicted(floor_s, busy / workers)
    fix = Fix(", ".join(f"{k}={v!r}" for k, v in changes.items()) + " (or read ahead)", changes)
    return Diagnosis("I/O latency", evidence, fix, run.period_s, predicted)


def _more_waiting_workers(busy: float, floor_s: float, facts: LoaderFacts) -> dict[str, Any]:
    """Workers that mostly wait (``busy`` seconds a batch) to keep up with a ``floor_s``
    step, 20 % headroom, at most 4 per CPU and 32; threads once processes outnumber CPUs
    (waiting threads are cheaper than processes)."""
    workers = max(facts.num_workers + 1, math.ceil(busy * 1.2 / max(floor_s, 1e-6)))
    changes: dict[str, Any] = {
        "num_workers": min(workers, 4 * max(facts.cpus, facts.num_workers), 32)
    }
    if facts.worker_type == "process" and changes["num_workers"] > facts.cpus:
        changes["worker_type"] = "thread"
    return changes


def _remote_reads(
    run: Measurement, floor_s: float, facts: LoaderFacts, busy: float
) -> Diagnosis | None:
    """Workers waiting mostly on remote readers that waited for blocks: each wait is a
    block's round trip the window did not hide. With ``READ_AHEAD_FIX`` blocks requested
    ahead a reader waits about once per ``READ_AHEAD_FIX`` blocks of an object (its first
    block; the others arrive meanwhile), so the waits beyond that go, each at the mean
    wait measured. None where that saves too little: more workers are the fix then."""
    counts, workers = run.stats.requests, run.stats.workers
    off_cpu_s = sum(max(0.0, w.busy_s - w.cpu_s) for w in workers)
    wait_s = counts.read_wait_s
    if not counts.requests or not counts.objects or not counts.read_waits:
        return None
    if wait_s < REMOTE_WAIT_SHARE * off_cpu_s:
        return None
    blocks_per_object = counts.requests / counts.objects
    waits_after = counts.objects * math.ceil(blocks_per_object / READ_AHEAD_FIX)
    saved_s = wait_s * max(0.0, 1.0 - waits_after / counts.read_waits)
    tasks = max(1, sum(w.batches for w in workers))
    busy_after = max(busy - saved_s / tasks, 0.0)
    predicted = _predicted(floor_s, busy_after / max(1, facts.num_workers))
    if predicted >= 0.9 * run.period_s:
        return None
    evidence = (
        f"workers busy {busy * 1e3:.1f} ms per batch, mostly off a CPU; their remote readers "
        f"waited {wait_s / tasks * 1e3:.1f} ms of it for blocks ({counts.read_waits:,} waits "
        f"of {wait_s / counts.read_waits * 1e3:.1f} ms on average, {counts.requests:,} "
        f"requests for {counts.objects:,} objects): round trips that read-ahead did not hide"
    )
    blocks = READ_AHEAD_FIX
    fix = Fix(
        f"read ahead {blocks} blocks: RemoteOptions(read_ahead={blocks}, "
        f"read_ahead_max={blocks}) for the dataset's remote reads (or "
        f"CONVEYOR_REMOTE_READ_AHEAD={blocks} where it takes the defaults, or autotune=True);"
        f" memory: up to {blocks} blocks per open object",
        read_ahead=blocks,
    )
    if busy_after / max(1, facts.num_workers) > 1.1 * floor_s:
        more = _more_waiting_workers(busy_after, floor_s, facts)
        kind = ", worker_type='thread'" if "worker_type" in more else ""
        fix = Fix(
            f"{fix.description}; then num_workers={more['num_workers']}{kind}", read_ahead=blocks
        )
    return Diagnosis("remote reads", evidence, fix, run.period_s, predicted)


def _cpu_workers(
    run: Measurement, floor_s: float, facts: LoaderFacts, busy: float, cpu: float, collate: float
) -> Diagnosis:
    name = "collate_fn" if collate >= 0.5 * busy else "worker CPU (decode, transforms)"
    evidence = f"workers on a CPU {cpu * 1e3:.1f} ms per batch"
    if name == "collate_fn":
        evidence += f", {collate * 1e3:.1f} ms of it in collate_fn"
    # the loop's own CPU (a step on the CPU) leaves fewer cores for workers
    free = max(1.0, facts.cpus - min(1.0, run.loop_cpu_s / run.wall_s))
    workers = min(math.ceil(busy * 1.2 / max(floor_s, 1e-6)), round(free))
    if workers <= facts.num_workers:
        fix = Fix(f"make {name} cheaper (no CPU is free for more workers)")
        return Diagnosis(name, evidence, fix, run.period_s, run.period_s)
    predicted = _predicted(floor_s, _cpu_bound_period(run, facts, busy, cpu, workers))
    fix = Fix(f"num_workers={workers}", {"num_workers": workers})
    return Diagnosis(name, evidence, fix, run.period_s, predicted)


def crop_aware(diagnosis: Diagnosis, share: float) -> Diagnosis:
    """``diagnosis`` (workers on a CPU) when ``share`` of a sample's time is Pillow decoding
    whole JPEGs that are then cropped: decoding at the crop's size is named too. Its gain
    is not predicted (the doctor cannot run the dataset with another decoder)."""
    named = (
        "decode at the crop's size: conveyor.vision.RandomResizedCropDecoder / "
        "CenterCropDecoder (the JPEG's IDCT scale that the crop needs; "
        "docs/guide/decode-at-size.md), gain not predicted"
    )
    evidence = (
        f"{diagnosis.evidence}; {share:.0%} of a sample's time is Pillow decoding the whole "
        "JPEG, which a crop or resize then shrinks"
    )
    fix = diagnosis.fix
    if fix.applicable:  # the fix as it was (all of it), its description extended
        fix = dataclasses.replace(fix, description=f"{fix.description}; and {named}")
    else:
        fix = Fix(named)
    return Diagnosis(
        diagnosis.bottleneck, evidence, fix, diagnosis.period_s, diagnosis.predicted_period_s
    )


def _cpu_bound_period(
    run: Measurement, facts: LoaderFacts, busy: float, cpu: float, workers: int
) -> float:
    """The loader's period with ``workers`` workers whose batches cost ``cpu`` seconds of
    CPU (and what they waited on beyond a CPU): no faster than each worker doing its
    batches one by one, nor than the CPU share the scheduler gives them doing all of them."""
    tasks = max(1, sum(w.batches for w in run.stats.workers))
    waiting = max(0.0, busy - cpu - run.cpu_queue_s / tasks)  # I/O, not the CPU queue
    return max((cpu + waiting) / workers, cpu / cores_for_workers(run, facts, workers))


def cores_for_workers(run: Measurement, facts: LoaderFacts, workers: int) -> float:
    """CPUs that ``workers`` workers, all runnable, would get from the scheduler.

    Linux shares the CPUs evenly between the threads that are runnable, so a new worker
    takes its share from every other job, not only from the CPUs left idle. The others'
    demand is measured: the cores busy with other work (``/proc/stat``) and, when no CPU
    was idle, the run-queue wait of the workers (``schedstat``: with ``D`` threads
    runnable on ``C`` CPUs each runs ``C / D`` of the time it wants, so ``D = C / share``).
    """
    cpus = float(facts.cpus)
    wall = max(run.wall_s, 1e-9)
    stats = run.stats.workers
    on_cpu = sum(w.cpu_s for w in stats)
    runnable = (on_cpu + run.cpu_queue_s) / wall  # workers wanting a CPU, on average
    used = on_cpu / wall
    idle = run.idle_cores if run.idle_cores is not None else cpus - used
    others = max(0.0, cpus - idle - used)  # cores running something else (the loop too)
    share = on_cpu / (on_cpu + run.cpu_queue_s) if on_cpu > 0 else 1.0
    if idle < 0.5 and share < 1.0:  # no CPU to spare: the queue says how many compete
        others = max(others, cpus / share - runnable)
    return max(0.1, workers * min(1.0, cpus / (others + workers)))
