"""Autotune: how many workers take tasks and how many tasks are in flight, while an epoch runs.

Aim: the training loop never waits for data, at the least CPU. Every ``window_batches``
deliveries the `Tuner` reads the epoch's counters (`StepClock`): the consumer's time
between ``next()`` calls (its step), the time it waited inside ``next()``, and the
workers' busy time per batch. From those it computes the workers the step needs,
``ceil(busy per batch * (1 + headroom) / step)``, and moves toward it: at once upward
when the loop waits, one worker at a time downward after two quiet windows (no
oscillation from one noisy window). When the loop still waits with enough workers
(bursty tasks), each worker gets one more task in flight, up to ``max_prefetch_factor``
and the memory budget.

The tuner decides numbers only; the iterator deals tasks to the first ``active`` workers
(the others stay started, idle, holding their memory, using no CPU). Which worker fetches
a sample does not change which samples arrive or their order (in-order delivery follows
dispatch order), so only map-style data without its own state lets the worker count
change; other data keeps its workers and tunes the prefetch depth only.
"""

from __future__ import annotations

import logging
import math
import os
from typing import TYPE_CHECKING

from conveyor.engine.workers.frozen import Frozen

if TYPE_CHECKING:
    from conveyor.stats.counters import StepClock
    from conveyor.stats.report import Decision

__all__ = ["AutotuneOptions", "Tuner", "available_cpus"]

log = logging.getLogger("conveyor.autotune")


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class AutotuneOptions(Frozen):
    """``DataLoader(..., autotune=AutotuneOptions(...))``; ``autotune=True`` takes these
    defaults. ``num_workers`` is the ceiling: that many workers start, autotune chooses how
    many of them take tasks.

    Args:
        min_workers: never fewer workers taking tasks.
        initial_workers: workers taking tasks when an epoch starts; None: half the
            ceiling, rounded up.
        cpu_budget: CPUs the workers may keep busy at once (a worker counts by its measured
            CPU share, so workers waiting on I/O cost little); None: the CPUs this process
            may use.
        memory_budget_bytes: most bytes of batches in flight (measured per batch from
            process workers); None: no limit beyond ``max_prefetch_factor``.
        target_wait_share: the loop may wait for data this share of its time; above it,
            autotune adds workers (or depth).
        headroom: spare capacity kept above the step's need (variance in task time).
        window_batches: batches between two decisions.
        max_prefetch_factor: most tasks in flight per worker taking tasks.
    """

    __slots__ = (
        "cpu_budget",
        "headroom",
        "initial_workers",
        "max_prefetch_factor",
        "memory_budget_bytes",
        "min_workers",
        "target_wait_share",
        "window_batches",
    )
    min_workers: int
    initial_workers: int | None
    cpu_budget: float | None
    memory_budget_bytes: int | None
    target_wait_share: float
    headroom: float
    window_batches: int
    max_prefetch_factor: int

    def __init__(
        self,
        *,
        min_workers: int = 1,
        initial_workers: int | None = None,
        cpu_budget: float | None = None,
        memory_budget_bytes: int | None = None,
        target_wait_share: float = 0.02,
        headroom: float = 0.2,
        window_batches: int = 8,
        max_prefetch_factor: int = 8,
    ) -> None:
        if min_workers < 1 or (initial_workers is not None and initial_workers < 1):
            raise ValueError(
                "autotune min_workers and initial_workers should be >= 1, got "
                f"{min_workers} and {initial_workers}"
            )
        if cpu_budget is not None and cpu_budget <= 0:
            raise ValueError(f"autotune cpu_budget should be > 0 CPUs, got {cpu_budget}")
        if memory_budget_bytes is not None and memory_budget_bytes <= 0:
            raise ValueError(
                f"autotune memory_budget_bytes should be > 0, got {memory_budget_bytes}"
            )
        if not 0 < target_wait_share < 1:
            raise ValueError(
                f"autotune target_wait_share should be in (0, 1), got {target_wait_share}"
            )
        if window_batches < 1 or max_prefetch_factor < 1 or headroom < 0:
            raise ValueError(
                "autotune window_batches and max_prefetch_factor should be >= 1 and headroom "
                f">= 0, got {window_batches}, {max_prefetch_factor}, {headroom}"
            )
        self._set(locals())


def autotune_options(value: bool | AutotuneOptions | None) -> AutotuneOptions | None:
    """``autotune=`` as given to the DataLoader: False/None off, True the defaults."""
    if value is None or value is False:
        return None
    if value is True:
        return AutotuneOptions()
    if isinstance(value, AutotuneOptions):
        return value
    raise ValueError(
        f"autotune should be a bool or conveyor.AutotuneOptions, got {type(value).__name__}"
    )


class _Window:
    """Cumulative counters at the start of the current window."""

    __slots__ = ("batches", "busy_s", "compute_s", "cpu_s", "ready", "wait_s", "worker_batches")

    def __init__(self, clock: StepClock | None = None) -> None:
        if clock is None:
            self.batches = self.ready = self.worker_batches = 0
            self.wait_s = self.compute_s = self.busy_s = self.cpu_s = 0.0
            return
        self.batches, self.ready = clock.batches, clock.ready_batches
        self.wait_s, self.compute_s = clock.wait_s, clock.compute_s
        self.busy_s, self.cpu_s, self.worker_batches = clock.worker_totals()


class _Rates:
    """One window's rates: the loop's wait share and step, the workers' busy time and CPU
    share per task, batches ready when asked, and the workers the step needs."""

    def __init__(self, before: _Window, now: _Window, headroom: float) -> None:
        batches = max(1, now.batches - before.batches)
        wait, step = now.wait_s - before.wait_s, now.compute_s - before.compute_s
        tasks = now.worker_batches - before.worker_batches
        busy_s = now.busy_s - before.busy_s
        self.busy = busy_s / tasks if tasks else 0.0
        self.cpu_share = min(1.0, (now.cpu_s - before.cpu_s) / busy_s) if busy_s > 0 else 1.0
        self.wait_share = wait / (wait + step) if wait + step > 0 else 0.0
        self.ready_share = (now.ready - before.ready) / batches
        self.step = step / batches
        self.need = math.ceil(self.busy * (1 + headroom) / max(self.step, 1e-6))


class Tuner:
    """The controller of one iterator (all its epochs). Pure: reads a `StepClock`, returns
    numbers; the iterator applies them.

    Against oscillation: the window after a change is skipped (it measures the change
    taking effect), and a worker count at which the loop waited is not retired to again
    until the step time moves by a quarter."""

    def __init__(
        self, options: AutotuneOptions, ceiling: int, prefetch_factor: int, workers_tunable: bool
    ) -> None:
        self.options = options
        self.ceiling = ceiling
        self.workers_tunable = workers_tunable
        initial = options.initial_workers or math.ceil(ceiling / 2)
        floor = min(options.min_workers, ceiling)
        self.active = max(floor, min(initial, ceiling)) if workers_tunable else ceiling
        self.per_worker = max(1, prefetch_factor)
        self._quiet_windows = 0
        self._settling = False
        self._too_few = 0  # the most workers at which the loop was seen waiting
        self._too_few_step = 0.0  # the step time then
        self._window = _Window()

    @property
    def tasks_in_flight(self) -> int:
        return self.active * self.per_worker

    def new_epoch(self) -> None:
        self._window = _Window()
        self._quiet_windows = 0
        self._settling = False

    def observe(self, clock: StepClock) -> Decision | None:
        """Called once per delivered batch; every ``window_batches`` it may decide."""
        if clock.batches - self._window.batches < self.options.window_batches:
            return None
        before, self._window = self._window, _Window(clock)
        if before.batches == 0 or self._settling:
            self._settling = False  # start-up, or the last change taking effect
            return None
        rates = _Rates(before, self._window, self.options.headroom)
        decision = self._decide(rates, clock.bytes_moved / max(1, clock.batches), clock.batches)
        self._settling = decision is not None
        return decision

    def _decide(self, rates: _Rates, bytes_per_batch: float, batch: int) -> Decision | None:
        if self._too_few and abs(rates.step - self._too_few_step) > 0.25 * self._too_few_step:
            self._too_few = 0  # the step changed: what was too few may not be now
        active, per_worker, reason = self.active, self.per_worker, ""
        if rates.wait_share > self.options.target_wait_share:
            self._quiet_windows = 0
            if rates.ready_share >= 0.8:
                return None  # batches were there: the main process's wait, not the workers'
            self._too_few, self._too_few_step = max(self._too_few, active), rates.step
            most = self._most_workers(rates.cpu_share)
            waited = f"the loop waited {rates.wait_share:.0%} of its time"
            if self.workers_tunable and active < most:
                active = min(max(active + 1, rates.need), most)
                reason = f"{waited}; {rates.need} workers needed"
            elif per_worker < self.options.max_prefetch_factor:
                per_worker += 1
                reason = f"{waited} with enough workers: deeper prefetch"
        elif self._may_retire(rates):
            self._quiet_windows += 1
            if self._quiet_windows >= 2:
                self._quiet_windows = 0
                active -= 1
                reason = f"no wait, {rates.need} of {self.active} workers suffice"
        else:
            self._quiet_windows = 0
        per_worker = self._within_memory(active, per_worker, bytes_per_batch)
        if (active, per_worker) == (self.active, self.per_worker):
            return None
        self.active, self.per_worker = active, per_worker
        return self._decided(batch, reason or "memory budget")

    def _may_retire(self, rates: _Rates) -> bool:
        floor = max(self.options.min_workers, self._too_few + 1)
        return self.workers_tunable and rates.need < self.active and self.active > floor

    def _decided(self, batch: int, reason: str) -> Decision:
        from conveyor.stats.report import Decision  # loaded with the first change (S4)

        decision = Decision(batch, self.active, self.tasks_in_flight, reason)
        log.info(
            "autotune: %d of %d workers, %d tasks in flight (%s)",
            self.active,
            self.ceiling,
            decision.tasks_in_flight,
            reason,
        )
        return decision

    def _most_workers(self, cpu_share: float) -> int:
        """The ceiling, and no more workers than the CPU budget keeps busy."""
        budget = self.options.cpu_budget or float(available_cpus())
        return max(1, min(self.ceiling, math.floor(budget / max(cpu_share, 0.05))))

    def _within_memory(self, active: int, per_worker: int, bytes_per_batch: float) -> int:
        budget = self.options.memory_budget_bytes
        if budget is None or bytes_per_batch <= 0:
            return per_worker
        return max(1, min(per_worker, int(budget // (bytes_per_batch * active))))
