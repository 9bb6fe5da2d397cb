"""Cheap counters kept while loading (`StepClock`); the snapshot and verdict they support
are `conveyor.stats.report` (imported when ``loader.stats()`` is first called).

The training loop alternates between waiting inside ``next(loader)`` and computing
between calls. `StepClock` splits wall time into those two parts with two
``perf_counter`` reads per batch; workers report how long they were busy fetching.
If the loop spends a sizeable share of its time waiting for data, the loader is the
bottleneck; otherwise the model is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from conveyor.stats.requests import RequestCounts

if TYPE_CHECKING:
    from conveyor.stats.figures import StageProfile
    from conveyor.stats.report import LoaderStats

__all__ = ["StepClock"]


class StepClock:
    """Splits the loop's wall time into waiting (inside next) and computing (between)."""

    __slots__ = (
        "_in_flight_sum",
        "_last_exit",
        "_ready",
        "_ready_batches",
        "_workers",
        "batches",
        "bytes_moved",
        "certificate",
        "compute_s",
        "decisions",
        "held_sum",
        "pin_receive_cpu_s",
        "pin_s",
        "pins",
        "ready_wait_s",
        "requests",
        "samples",
        "skipped",
        "stage_source",
        "startup_s",
        "wait_s",
        "worker_stages",
    )

    def __init__(self) -> None:
        self.batches = 0
        self.samples = 0
        self.wait_s = 0.0
        self.compute_s = 0.0
        self._last_exit: float | None = None
        # per worker: [tasks, busy s, CPU s, collate s, longest task s] (one lookup a task)
        self._workers: dict[int, list[float]] = {}
        self._ready_batches = 0
        self._ready = False  # the batch being handed out was waiting already
        self.ready_wait_s = 0.0  # time inside next() for batches that were already there
        self._in_flight_sum = 0
        self.held_sum = 0
        self.pin_s = 0.0  # time in pin_memory (the pin thread's busy time, or next()'s)
        self.pins = 0
        self.pin_receive_cpu_s = 0.0  # the pin thread's CPU between pins (receiving batches)
        self.decisions: list[Any] = []  # autotune's changes (conveyor.stats.figures.Decision)
        self.skipped = 0
        self.bytes_moved = 0
        self.startup_s = 0.0
        self.worker_stages: dict[int, tuple[StageProfile, ...]] = {}  # latest, per worker
        self.stage_source: Callable[[], tuple[StageProfile, ...]] | None = None
        # the epoch's data-order certificate (conveyor.state.certificate): digest, samples
        self.certificate: tuple[str, int] = ("0" * 16, 0)
        self.requests = RequestCounts()  # remote requests of the epoch, every process's

    def queue_seen(self, ready: bool, in_flight: int, held: int = 0) -> None:
        """Multi-worker: whether the batch was waiting already, how many were in work, and
        (when it was not) how many later results were ready behind it (in order)."""
        self._ready_batches += ready
        self.held_sum += held
        self._ready = ready
        self._in_flight_sum += in_flight

    def worker_did(
        self, worker_id: int, busy_s: float, cpu_s: float = 0.0, collate_s: float = 0.0
    ) -> None:
        """A worker reported one task that kept it busy for ``busy_s`` (``cpu_s`` of it on
        a CPU, ``collate_s`` of it in collate_fn)."""
        counts = self._workers.get(worker_id)
        if counts is None:
            counts = self._workers[worker_id] = [0, 0.0, 0.0, 0.0, 0.0]
        counts[0] += 1
        counts[1] += busy_s
        counts[2] += cpu_s
        counts[3] += collate_s
        counts[4] = max(counts[4], busy_s)

    def pinned(self, seconds: float, receive_cpu_s: float = 0.0) -> None:
        """One batch pinned in ``seconds``, after ``receive_cpu_s`` of the pin thread's CPU
        receiving it (called from the pin thread: one writer)."""
        self.pin_s += seconds
        self.pins += 1
        self.pin_receive_cpu_s += receive_cpu_s

    @property
    def ready_batches(self) -> int:
        """Batches that were waiting already when next() asked (workers only)."""
        return self._ready_batches

    def worker_totals(self) -> tuple[float, float, int]:
        """All workers' busy seconds, CPU seconds and tasks so far (autotune's window)."""
        counts = self._workers.values()
        return sum(c[1] for c in counts), sum(c[2] for c in counts), int(sum(c[0] for c in counts))

    def enter(self) -> float:
        now = time.perf_counter()
        if self._last_exit is not None:
            self.compute_s += now - self._last_exit
        return now

    def leave(self, entered: float, samples: int) -> None:
        now = time.perf_counter()
        if self._last_exit is None:
            self.startup_s = now - entered  # start-up, not steady-state waiting
        else:
            self.wait_s += now - entered
            if self._ready:
                self.ready_wait_s += now - entered
        self._ready = False
        self._last_exit = now
        self.batches += 1
        self.samples += samples

    def snapshot(self) -> LoaderStats:
        from conveyor.stats.figures import WorkerStats
        from conveyor.stats.report import LoaderStats

        workers = tuple(
            WorkerStats(w, int(c[0]), c[1], c[2], c[3], c[4])
            for w, c in sorted(self._workers.items())
        )
        return LoaderStats(
            batches=self.batches,
            samples=self.samples,
            wait_s=self.wait_s,
            compute_s=self.compute_s,
            workers=workers,
            ready_batches=self._ready_batches,
            in_flight_sum=self._in_flight_sum,
            skipped=self.skipped,
            bytes_moved=self.bytes_moved,
            startup_s=self.startup_s,
            stages=self._stages(),
            epoch_digest=self.certificate[0],
            epoch_samples=self.certificate[1],
            requests=self.requests,
            ready_wait_s=self.ready_wait_s,
            held_sum=self.held_sum,
            pin_s=self.pin_s,
            pins=self.pins,
            pin_receive_cpu_s=self.pin_receive_cpu_s,
            decisions=tuple(self.decisions),
        )

    def _stages(self) -> tuple[StageProfile, ...]:
        from conveyor.stats.figures import merge_stages

        if self.stage_source is not None:
            return self.stage_source()
        totals: tuple[StageProfile, ...] = ()
        for stages in self.worker_stages.values():
            totals = merge_stages(totals, stages)
        return totals
