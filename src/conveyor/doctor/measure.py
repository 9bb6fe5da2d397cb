"""One measured run of a loader under a training step, and the step's own floor.

`measure` runs up to ``batches`` batches, calling ``step(batch)`` between ``next()``
calls as a training loop does, and keeps what ``stats()`` counted, the main process's GC
pauses and CPU time, and a few batches. `headspace` replays those batches through the
step alone: the consumer's floor, what one batch costs when data is free.

The batches for the replay are the run's last ones (or taken after it), not its first:
a batch held through the run keeps its shared-memory slab from the workers, and with four
of them held the main process paid ~1.2 ms more per batch (pin scenario, pin_memory=False,
2 cores), which a loop that drops its batches does not pay.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conveyor.distributed import world_and_rank
from conveyor.stats.report import LoaderStats
from conveyor.transport.main_end import ShmFallbackWarning

__all__ = ["Measurement", "headspace", "measure"]

Step = Callable[[Any], object]
KEPT_BATCHES = 4  # batches kept for the replay (few: process workers' slabs stay in use)


@dataclass(frozen=True)
class Measurement:
    """What one run showed: ``stats`` (the epoch's counters) and what they lack."""

    stats: LoaderStats
    wall_s: float  # from the first batch's arrival to the last step's end
    gc_pause_s: float  # main-process garbage collections during that time
    gc_collections: int
    main_cpu_s: float  # the main process's CPU time (all its threads) during that time
    loop_cpu_s: float  # of which the training loop's own thread
    cpu_queue_s: float = 0.0  # workers runnable but waiting for a CPU (Linux schedstat)
    idle_cores: float | None = None  # CPUs the whole machine left idle, on average (/proc/stat)
    shm_note: str | None = None  # why batches were pickled (`ShmFallbackWarning.note`)
    # each worker process's private memory (bytes) after the first batch and at the end
    worker_memory: tuple[tuple[int, int], ...] = ()

    @property
    def worker_growth_bytes(self) -> float:
        """The mean growth of the worker processes' private memory over the run (0: none
        measured, or thread workers)."""
        grown = [end - start for start, end in self.worker_memory]
        return sum(grown) / len(grown) if grown else 0.0

    @property
    def pin_per_batch_s(self) -> float:
        """pin_memory=True: the pin stage's seconds per batch (the pin thread's, or next()'s)."""
        return self.stats.pin_s / self.stats.pins if self.stats.pins else 0.0

    @property
    def batches(self) -> int:
        return max(1, self.stats.batches - 1)  # the first batch is start-up

    @property
    def period_s(self) -> float:
        """Seconds per batch, steady state."""
        return self.wall_s / self.batches

    @property
    def wait_per_batch_s(self) -> float:
        return self.stats.wait_s / self.batches

    @property
    def step_per_batch_s(self) -> float:
        return self.stats.compute_s / self.batches

    @property
    def gc_per_batch_s(self) -> float:
        return self.gc_pause_s / self.batches


class _GcClock:
    """Sums the main process's GC pauses (gc.callbacks) while installed."""

    def __init__(self) -> None:
        self.pause_s = 0.0
        self.collections = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pause_s += time.perf_counter() - self._started
            self.collections += 1

    def __enter__(self) -> _GcClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def measure(
    loader: Any,
    step: Step,
    batches: int,
    max_seconds: float,
    on_start: Callable[[Any], None] | None = None,
) -> tuple[Measurement, list[Any]]:
    """Run ``loader`` for up to ``batches`` batches (or ``max_seconds``) under ``step``;
    the measurement and the first few batches. The epoch is left unfinished. Under
    torch.distributed every rank runs all ``batches`` (a step may hold collectives: ranks
    stopping at different batches would hang). ``on_start`` gets the epoch's iterator
    before its first batch (a counterfactual's message to the workers)."""
    if world_and_rank()[0] > 1:
        max_seconds = float("inf")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ShmFallbackWarning)
        measured, kept = _measure(loader, step, batches, max_seconds, on_start)
    notes = [w.message.note for w in caught if isinstance(w.message, ShmFallbackWarning)]
    for w in caught:  # the user's own warnings go on as they would have
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if notes:
        measured = dataclasses.replace(measured, shm_note=notes[0])
    return measured, kept


def _measure(
    loader: Any,
    step: Step,
    batches: int,
    max_seconds: float,
    on_start: Callable[[Any], None] | None,
) -> tuple[Measurement, list[Any]]:
    kept: list[Any] = []
    iterator = iter(loader)
    try:
        if on_start is not None:
            on_start(iterator)
        first = next(iterator, None)
        if first is None:
            raise ValueError("doctor: the loader yields no batch")
        short = _may_end_within(loader, batches + KEPT_BATCHES)
        if short:
            kept.append(first)  # the replay may get no later batch: keep from the start
        step(first)
        del first
        tasks = _worker_tasks(iterator)
        pids = _worker_pids(iterator)
        memory = [_private_bytes(pid) for pid in pids]
        queued, ticks = _queued_s(tasks), _cpu_ticks()
        started, cpu_started = time.perf_counter(), time.process_time()
        loop_started = time.thread_time()
        deadline = started + max_seconds
        last_ones = 0 if short else batches - 1 - KEPT_BATCHES  # from here on: kept
        with _GcClock() as gc_clock:
            for i, batch in enumerate(itertools.islice(iterator, batches - 1)):
                if i >= last_ones and len(kept) < KEPT_BATCHES:
                    kept.append(batch)
                step(batch)
                del batch  # held no longer than a loop holds it
                if time.perf_counter() > deadline:
                    break
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        loop_cpu = time.thread_time() - loop_started
        queued = _queued_s(tasks) - queued
        idle = _idle_cores(ticks, _cpu_ticks())
        grown = tuple(
            (start, end)
            for start, end in zip(memory, [_private_bytes(pid) for pid in pids], strict=True)
            if start is not None and end is not None
        )
        stats = loader.stats()
        # stopped early (deadline): the replay's batches come after the measured run
        kept.extend(itertools.islice(iterator, KEPT_BATCHES - len(kept)))
    finally:
        close = getattr(iterator, "close", None)
        if close is not None and not getattr(loader, "persistent_workers", False):
            close()  # the doctor's run ends here: its workers too
    measured = Measurement(
        stats,
        wall,
        gc_clock.pause_s,
        gc_clock.collections,
        cpu,
        loop_cpu,
        queued,
        idle,
        worker_memory=grown,
    )
    return measured, kept


def _may_end_within(loader: Any, batches: int) -> bool:
    """Whether ``loader`` may yield fewer than ``batches`` batches (unsized: it may)."""
    try:
        return len(loader) < batches
    except TypeError:  # an IterableDataset without __len__
        return True


def _worker_pids(iterator: Any) -> list[int]:
    """The worker processes' ids (none with thread workers or without workers)."""
    pids = [getattr(w, "pid", None) for w in getattr(iterator, "_workers", [])]
    return [pid for pid in pids if isinstance(pid, int) and pid]


def _private_bytes(pid: int) -> int | None:
    """The pages only process ``pid`` holds (its unique set size): those a forked worker
    wrote, copy-on-read included. None where /proc/PID/smaps_rollup is not to be read
    (not Linux 4.14+, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            lines = rollup.read().splitlines()
    except OSError:
        return None
    private = ("Private_Clean:", "Private_Dirty:")
    kib = [int(line.split()[1]) for line in lines if line.startswith(private)]
    return 1024 * sum(kib) if kib else None


def _worker_tasks(iterator: Any) -> list[str]:
    """/proc directories of the threads that fetch: worker processes' threads, or with
    thread workers this process's threads but the loop's own."""
    pids = _worker_pids(iterator)
    if pids:
        return [f"/proc/{pid}/task/{tid}" for pid in pids for tid in _listdir(f"/proc/{pid}/task")]
    try:
        loop = os.readlink("/proc/thread-self").rsplit("/", 1)[-1]  # this thread's id
    except OSError:
        return []
    return [f"/proc/self/task/{tid}" for tid in _listdir("/proc/self/task") if tid != loop]


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:  # not Linux, or the process is gone
        return []


def _queued_s(tasks: list[str]) -> float:
    """Seconds these threads spent runnable, waiting for a CPU (schedstat's 2nd field)."""
    total = 0
    for task in tasks:
        try:
            with open(f"{task}/schedstat") as stat:
                total += int(stat.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def _cpu_ticks() -> tuple[int, int, int] | None:
    """(idle ticks, all ticks, CPUs) of the whole machine so far; None if not Linux."""
    try:
        with open("/proc/stat") as stat:
            lines = stat.read().splitlines()
    except OSError:
        return None
    fields = [int(x) for x in lines[0].split()[1:]]
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return fields[3] + fields[4], sum(fields[:8]), cpus  # idle + iowait; user .. steal


def _idle_cores(
    before: tuple[int, int, int] | None, after: tuple[int, int, int] | None
) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return after[2] * (after[0] - before[0]) / (after[1] - before[1])


def headspace(step: Step, batches: list[Any], replays: int = 16) -> float:
    """The step's own seconds per batch: ``batches`` replayed, the loader out of the way.
    The mean: the step's own pauses (its garbage collections) are part of its floor."""
    started = time.perf_counter()
    for batch in itertools.islice(itertools.cycle(batches), replays):
        step(batch)
    return (time.perf_counter() - started) / replays
