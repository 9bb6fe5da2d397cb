"""Cheap counters kept while loading, and the verdict they support.

The training loop alternates between waiting inside ``next(loader)`` and computing
between calls. `StepClock` splits wall time into those two parts with two
``perf_counter`` reads per batch; workers report how long they were busy fetching.
If the loop spends a sizeable share of its time waiting for data, the loader is the
bottleneck; otherwise the model is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# Above this share of wall time spent waiting in next(), the loader limits training.
BOTTLENECK_WAIT_SHARE = 0.10


@dataclass(frozen=True)
class WorkerStats:
    """One worker's work this epoch."""

    worker_id: int
    batches: int
    busy_s: float  # time spent fetching and collating


@dataclass(frozen=True)
class StageProfile:
    """One node: items it produced, time inside it with and without its inputs."""

    name: str
    items: int
    total_s: float
    self_s: float

    @property
    def items_per_s(self) -> float:
        return self.items / self.total_s if self.total_s > 0 else float("inf")


def merge_stages(
    totals: tuple[StageProfile, ...], more: tuple[StageProfile, ...]
) -> tuple[StageProfile, ...]:
    """Add up the same graph's stages measured in several workers (position by position)."""
    if not totals:
        return more
    return tuple(
        StageProfile(a.name, a.items + b.items, a.total_s + b.total_s, a.self_s + b.self_s)
        for a, b in zip(totals, more, strict=True)
    )


@dataclass(frozen=True)
class LoaderStats:
    """A snapshot of the current (or last) epoch, from ``DataLoader.stats()``."""

    batches: int
    samples: int
    wait_s: float  # time the training loop spent inside next(), after the first batch
    compute_s: float  # time between next() calls (the training step)
    workers: tuple[WorkerStats, ...] = field(default_factory=tuple)
    ready_batches: int = 0  # batches that were already waiting when next() asked (workers)
    skipped: int = 0  # bad samples dropped by on_error="skip"
    bytes_moved: int = 0  # bytes that crossed from worker processes (pipe + shared memory)
    startup_s: float = 0.0  # wait for the first batch (workers starting, caches filling)
    stages: tuple[StageProfile, ...] = ()  # DataPipe stages, with profile_stages=True

    def slowest_stage(self) -> StageProfile | None:
        return max(self.stages, key=lambda s: s.self_s, default=None)

    in_flight_sum: int = 0  # tasks inside workers, summed over those next() calls

    @property
    def ready_share(self) -> float:
        """Share of batches that were ready before the loop asked (workers only)."""
        return self.ready_batches / self.batches if self.batches else 0.0

    @property
    def mean_in_flight(self) -> float:
        """Average number of tasks being worked on when the loop asked for a batch."""
        return self.in_flight_sum / self.batches if self.batches else 0.0

    @property
    def elapsed_s(self) -> float:
        return self.wait_s + self.compute_s

    @property
    def wait_share(self) -> float:
        """Fraction of the loop's time spent waiting for data (0 to 1)."""
        return self.wait_s / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def loader_is_bottleneck(self) -> bool:
        return self.wait_share > BOTTLENECK_WAIT_SHARE

    def slowest_worker(self) -> WorkerStats | None:
        busy = [w for w in self.workers if w.batches]
        return max(busy, key=lambda w: w.busy_s / w.batches) if busy else None

    def summary(self) -> str:
        """One line: throughput, data-wait share, and what limits training."""
        head = (
            f"{self.batches} batches, {self.samples_per_s:,.0f} samples/s, first batch after "
            f"{self.startup_s:.2f} s, then waiting for data {self.wait_share:.0%} of the time"
        )
        if self.workers and self.elapsed_s > 0:
            busy = sum(w.busy_s for w in self.workers) / (len(self.workers) * self.elapsed_s)
            head += (
                f", {self.ready_share:.0%} of batches ready when asked, "
                f"workers busy {min(busy, 1.0):.0%}"
            )
        if not self.batches:
            return head + ": nothing loaded yet"
        if not self.loader_is_bottleneck:
            return head + ": the loader keeps up; the training step is the bottleneck"
        verdict = head + ": the loader is the bottleneck"
        stage = self.slowest_stage()
        if stage is not None:
            verdict += f"; slowest stage: {stage.name} ({stage.self_s:.2f} s of work)"
        slowest = self.slowest_worker()
        if slowest is not None:
            per_batch_ms = 1e3 * slowest.busy_s / slowest.batches
            verdict += (
                f" (workers busy {per_batch_ms:.1f} ms per batch; slowest worker "
                f"{slowest.worker_id}): add workers or make __getitem__/collate cheaper"
            )
        return verdict


class StepClock:
    """Splits the loop's wall time into waiting (inside next) and computing (between)."""

    __slots__ = (
        "_in_flight_sum",
        "_last_exit",
        "_ready_batches",
        "_worker_batches",
        "_worker_busy",
        "batches",
        "bytes_moved",
        "compute_s",
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
        self._worker_batches: dict[int, int] = {}
        self._worker_busy: dict[int, float] = {}
        self._ready_batches = 0
        self._in_flight_sum = 0
        self.skipped = 0
        self.bytes_moved = 0
        self.startup_s = 0.0
        self.worker_stages: dict[int, tuple[StageProfile, ...]] = {}  # latest, per worker
        self.stage_source: Callable[[], tuple[StageProfile, ...]] | None = None

    def queue_seen(self, ready: bool, in_flight: int) -> None:
        """Multi-worker: whether the batch was waiting already, and how many were in work."""
        self._ready_batches += ready
        self._in_flight_sum += in_flight

    def worker_did(self, worker_id: int, busy_s: float) -> None:
        """A worker reported one task that kept it busy for ``busy_s``."""
        self._worker_batches[worker_id] = self._worker_batches.get(worker_id, 0) + 1
        self._worker_busy[worker_id] = self._worker_busy.get(worker_id, 0.0) + busy_s

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
        self._last_exit = now
        self.batches += 1
        self.samples += samples

    def snapshot(self) -> LoaderStats:
        workers = tuple(
            WorkerStats(w, self._worker_batches[w], self._worker_busy[w])
            for w in sorted(self._worker_batches)
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
        )

    def _stages(self) -> tuple[StageProfile, ...]:
        if self.stage_source is not None:
            return self.stage_source()
        totals: tuple[StageProfile, ...] = ()
        for stages in self.worker_stages.values():
            totals = merge_stages(totals, stages)
        return totals
