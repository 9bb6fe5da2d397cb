"""The figures of one epoch: `EpochFigures` (what `LoaderStats` holds), per-worker
`WorkerStats`, per-stage `StageProfile` and autotune's `Decision`s.

Plain data and arithmetic; what they mean for training (the verdict) is
`conveyor.stats.verdict`, which reads them, and `conveyor.stats.report`, which says it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conveyor.stats.requests import RequestCounts

__all__ = ["Decision", "EpochFigures", "StageProfile", "WorkerStats", "merge_stages"]


@dataclass(frozen=True)
class WorkerStats:
    """One worker's work this epoch."""

    worker_id: int
    batches: int
    busy_s: float  # time spent fetching and collating
    cpu_s: float = 0.0  # of busy_s, on a CPU (the rest: waiting on I/O, locks, the GIL)
    collate_s: float = 0.0  # of busy_s, inside collate_fn
    longest_s: float = 0.0  # the longest single task


@dataclass(frozen=True)
class Decision:
    """One change autotune made while the epoch ran (``stats().decisions``)."""

    batch: int  # batches delivered when it was made
    active_workers: int
    tasks_in_flight: int  # the prefetch depth: tasks dispatched and not yet delivered
    reason: str
    read_ahead: int = 0  # blocks each remote reader keeps requested ahead; 0: its own


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
class EpochFigures:
    """What was counted over the current (or last) epoch, and the shares and means that
    follow from it; `LoaderStats` adds the reading of them (verdict, summary)."""

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
    # The epoch's data-order certificate: a multiset digest (16 hex digits) of the
    # identities of every sample delivered this epoch, a resumed run's included, and
    # their number. Equal digests: the same samples, each as often (any order, topology).
    epoch_digest: str = "0" * 16
    epoch_samples: int = 0

    def slowest_stage(self) -> StageProfile | None:
        return max(self.stages, key=lambda s: s.self_s, default=None)

    in_flight_sum: int = 0  # tasks inside workers, summed over those next() calls
    requests: RequestCounts = field(default_factory=RequestCounts)  # remote, all processes
    ready_wait_s: float = 0.0  # of wait_s, inside next() for batches already there
    decisions: tuple[Decision, ...] = ()  # autotune's changes this epoch, in order
    held_sum: int = 0  # in order: results ready behind the awaited one, summed over waits
    pin_s: float = 0.0  # pin_memory=True: time spent pinning (the pin thread's busy time)
    pins: int = 0  # batches pinned
    pin_receive_cpu_s: float = 0.0  # the pin thread's CPU receiving those batches

    @property
    def mean_held_while_waiting(self) -> float:
        """In order: later batches already there, on average, when the loop had to wait
        for one (head-of-line blocking; 0 in arrival order)."""
        waits = self.batches - self.ready_batches
        return self.held_sum / waits if waits > 0 else 0.0

    @property
    def workers_busy_share(self) -> float:
        """Workers' busy time over the time they were available (0 to 1; 0 without workers)."""
        if not self.workers or self.elapsed_s <= 0:
            return 0.0
        busy = sum(w.busy_s for w in self.workers) / (len(self.workers) * self.elapsed_s)
        return min(busy, 1.0)

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

    def slowest_worker(self) -> WorkerStats | None:
        busy = [w for w in self.workers if w.batches]
        return max(busy, key=lambda w: w.busy_s / w.batches) if busy else None
