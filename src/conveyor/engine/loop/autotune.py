"""Autotune: how many workers take tasks, how many tasks are in flight and how far remote
readers read ahead, while an epoch runs.

Aim: the training loop never waits for data, at the least CPU. The `Tuner` reads the
epoch's counters (`StepClock`) over windows of batches: the consumer's time between
``next()`` calls (its step), the time it waited inside ``next()``, and the workers' busy
time (and CPU time) per batch. From those it computes the workers the step needs,
``ceil(busy per batch * (1 + headroom) / step)``.

- Up fast: while the loop waits it decides every quarter window. Far behind (waiting more
  than four times the target share) with no busy time reported yet it scales the workers
  by the pace they kept (``active * (step + wait) / step``: one window from 1 to the
  count needed); else it takes them to the need, or (enough workers by the busy time:
  bursts, as many workers started together answer together) gives each one more task in
  flight. When the
  workers spend their busy time off the CPU while remote requests run, it also raises the
  remote readers' read-ahead (`Tuning`, `conveyor.storage.read_window`).
- Down in one move: after two quiet full windows, while twice the headroom remains, to
  the count the step needs (with the headroom once), and never to a count at which the
  loop was seen waiting for want of workers until the step time moves by a quarter (no
  oscillation; a wait answered by a deeper prefetch does not count). A window in which
  no worker answered keeps the last busy time (bursts: no measure).
- The wait for batches already there when asked for (receiving them: large batches from
  process workers) is the main process's own: more workers do not shorten it and take
  its CPU. Only the wait for batches not there yet counts against the target; a window
  whose wait is the loop's own is quiet for the workers (they may retire). On 16 cores
  the IPC-bound case kept all 16 workers for the wait that 1 worker gave at 0.6x the CPU.
- A change is judged only on batches dispatched after it: the tasks already in flight
  are delivered first (in order), so the next window starts after them.

The tuner decides numbers only; the iterator deals tasks to the first ``active`` workers
(the others stay started, idle, holding their memory, using no CPU). Which worker fetches
a sample does not change which samples arrive or their order (in-order delivery follows
dispatch order), so only map-style data without its own state lets the worker count
change; other data keeps its workers and tunes the depth and read-ahead only.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from conveyor.engine.loop.autotune_options import (
    AutotuneOptions,
    autotune_options,
    available_cpus,
)

if TYPE_CHECKING:
    from conveyor.stats.counters import StepClock
    from conveyor.stats.figures import Decision

__all__ = ["AutotuneOptions", "Tuner", "autotune_options", "available_cpus"]

log = logging.getLogger("conveyor.autotune")

FIRST_READ_AHEAD = 8
"""Blocks of the first raise: the widest window a reader reaches by itself by default
(``RemoteOptions.read_ahead_max``), so the raise is felt from every fresh reader on."""
_FAR_BEHIND = 4  # waiting this many times the target share: scale the workers by pace
_OFF_CPU = 0.5  # workers busy less than this share on a CPU wait on something (I/O)


class _Window:
    """Cumulative counters at the start of the current window."""

    __slots__ = (
        "batches",
        "busy_s",
        "compute_s",
        "cpu_s",
        "ready_wait_s",
        "requests",
        "wait_s",
        "worker_batches",
    )

    def __init__(self, clock: StepClock | None = None) -> None:
        if clock is None:
            self.batches = self.worker_batches = self.requests = 0
            self.wait_s = self.compute_s = self.busy_s = self.cpu_s = self.ready_wait_s = 0.0
            return
        self.batches, self.ready_wait_s = clock.batches, clock.ready_wait_s
        self.wait_s, self.compute_s = clock.wait_s, clock.compute_s
        self.busy_s, self.cpu_s, self.worker_batches = clock.worker_totals()
        self.requests = clock.requests.requests


class _Rates:
    """One window's rates: the loop's wait share and step, the workers' busy time and CPU
    share per task, how much of the wait was for batches already there (the main process's
    own: receiving them), remote requests, the workers the step needs."""

    def __init__(
        self, before: _Window, now: _Window, headroom: float, last: _Rates | None = None
    ) -> None:
        batches = max(1, now.batches - before.batches)
        wait, step = now.wait_s - before.wait_s, now.compute_s - before.compute_s
        tasks = now.worker_batches - before.worker_batches
        busy_s = now.busy_s - before.busy_s
        # many workers started together answer in bursts: a window may see no answer, and
        # then the last measured busy time and CPU share stand (none yet: 0 and 1)
        self.busy: float = busy_s / tasks if tasks else (last.busy if last else 0.0)
        self.cpu_share: float = last.cpu_share if last else 1.0
        if busy_s > 0:
            self.cpu_share = min(1.0, (now.cpu_s - before.cpu_s) / busy_s)
        self.wait_share = wait / (wait + step) if wait + step > 0 else 0.0
        ready_wait = now.ready_wait_s - before.ready_wait_s
        self.ready_wait_share = ready_wait / wait if wait > 0 else 0.0
        self.step = step / batches
        self.batches = batches
        self.remote = now.requests > before.requests
        self.headroom = headroom
        self.need = self.workers_for(headroom)

    def workers_for(self, headroom: float) -> int:
        return math.ceil(self.busy * (1 + headroom) / max(self.step, 1e-6))


class Tuner:
    """The controller of one iterator (all its epochs). Pure: reads a `StepClock`, returns
    numbers; the iterator applies them."""

    def __init__(
        self, options: AutotuneOptions, ceiling: int, prefetch_factor: int, workers_tunable: bool
    ) -> None:
        self.options = options
        self.ceiling = ceiling
        self.workers_tunable = workers_tunable
        initial = options.initial_workers or available_cpus()
        floor = min(options.min_workers, ceiling)
        self.active = max(floor, min(initial, ceiling)) if workers_tunable else ceiling
        self.per_worker = max(1, prefetch_factor)
        self.read_ahead = 0  # remote readers' own window until the workers wait on them
        self._quiet_windows = 0
        self._hurry = True  # the loop may be short: decide every quarter window
        self._quiet_batches = 0  # while hurrying: batches in a row without waiting
        self._too_few = 0  # the most workers at which the loop was seen waiting
        self._too_few_step = 0.0  # the step time then
        self._window: _Window | None = None
        self._last: _Rates | None = None  # the last window's (busy time, CPU share)
        self._judged_from = 0  # batches before this were dispatched before the last change

    @property
    def tasks_in_flight(self) -> int:
        return self.active * self.per_worker

    def new_epoch(self) -> None:
        self._window = None
        self._judged_from = 0
        self._quiet_windows = 0

    def observe(self, clock: StepClock) -> Decision | None:
        """Called once per delivered batch; at the end of a window it may decide."""
        if clock.batches < self._judged_from:
            return None  # tasks dispatched before the last change are still arriving
        if self._window is None:  # the first batch (start-up), or the first after a change
            self._window = _Window(clock)
            return None
        length = self.options.window_batches
        if self._hurry:
            length = max(2, length // 4)
        if clock.batches - self._window.batches < length:
            return None
        before, self._window = self._window, _Window(clock)
        rates = _Rates(before, self._window, self.options.headroom, self._last)
        self._last = rates
        in_flight = self.tasks_in_flight
        decision = self._decide(rates, clock.bytes_moved / max(1, clock.batches), clock.batches)
        if decision is not None:
            self._window, self._judged_from = None, clock.batches + in_flight
        return decision

    def _decide(self, rates: _Rates, bytes_per_batch: float, batch: int) -> Decision | None:
        if self._too_few and abs(rates.step - self._too_few_step) > 0.25 * self._too_few_step:
            self._too_few = 0  # the step changed: what was too few may not be now
        active, per_worker, read_ahead, reason = self.active, self.per_worker, self.read_ahead, ""
        target = self.options.target_wait_share
        # the wait for batches already there when asked for is the main process's own
        # (receiving them): more workers do not shorten it, they take its CPU instead
        waited = rates.wait_share * (1.0 - rates.ready_wait_share) > target
        own_wait = not waited and rates.wait_share > target
        if waited:
            self._quiet_windows = 0
            self._hurry, self._quiet_batches = True, 0
            active, per_worker, reason = self._more(rates)
            if active > self.active:  # too few workers (not too shallow a prefetch)
                self._too_few, self._too_few_step = max(self._too_few, self.active), rates.step
            read_ahead, reason = self._more_read_ahead(rates, reason)
        elif self._hurry:
            # a short window without waiting may be the start's prefetched batches: hurry
            # on until a full window of them was quiet
            self._quiet_batches += rates.batches
            self._hurry = self._quiet_batches < self.options.window_batches
        else:
            active, reason = self._retired(rates, own_wait)
        per_worker = self._within_memory(active, per_worker, bytes_per_batch)
        if (active, per_worker, read_ahead) == (self.active, self.per_worker, self.read_ahead):
            return None
        self.active, self.per_worker, self.read_ahead = active, per_worker, read_ahead
        return self._decided(batch, reason or "memory budget")

    def _more(self, rates: _Rates) -> tuple[int, int, str]:
        """The loop waited: more workers (at the pace kept when far behind), else depth."""
        active, per_worker = self.active, self.per_worker
        most = self._most_workers(rates.cpu_share)
        waited = f"the loop waited {rates.wait_share:.0%} of its time"
        far_behind = rates.wait_share > _FAR_BEHIND * self.options.target_wait_share
        # far behind with the busy time known and enough workers by it: bursts (deeper)
        far_behind = far_behind and rates.busy <= 0
        if self.workers_tunable and active < most and (far_behind or rates.need > active):
            # the workers delivered a batch per (step + wait): the rate scales with them.
            # Workers started together deliver in bursts, so a window's wait overstates
            # what is missing: the need, once their busy time is known and it is more.
            pace = math.ceil(active / max(1.0 - rates.wait_share, 0.05) - 1e-9)
            grown = max(active + 1, rates.need if rates.need > active else pace)
            return min(most, grown), per_worker, f"{waited}; {grown} workers keep pace"
        if per_worker < self.options.max_prefetch_factor:
            return active, per_worker + 1, f"{waited} with enough workers: deeper prefetch"
        if self.workers_tunable and active < most:
            return active + 1, per_worker, f"{waited} at the deepest prefetch"
        return active, per_worker, ""

    def _more_read_ahead(self, rates: _Rates, reason: str) -> tuple[int, str]:
        """Workers busy off the CPU while remote requests ran wait on the object store:
        each remote reader keeps more blocks requested ahead (doubled, up to the cap)."""
        cap = self.options.max_read_ahead
        if not rates.remote or rates.cpu_share >= _OFF_CPU or self.read_ahead >= cap:
            return self.read_ahead, reason
        read_ahead = min(cap, max(FIRST_READ_AHEAD, 2 * self.read_ahead))
        said = f"workers wait on remote reads: read-ahead {read_ahead} blocks"
        return read_ahead, f"{reason}; {said}" if reason else said

    def _retired(self, rates: _Rates, own_wait: bool) -> tuple[int, str]:
        """After two windows in a row in which the workers kept up, the workers the step
        needs (no fewer than the floor)."""
        if not self._may_retire(rates):
            self._quiet_windows = 0
            return self.active, ""
        self._quiet_windows += 1
        if self._quiet_windows < 2:
            return self.active, ""
        self._quiet_windows = 0
        why = "the loop waits on itself (batches were ready)" if own_wait else "no wait"
        active = max(self._floor(), rates.need)
        return active, f"{why}, {rates.need} of {self.active} workers suffice"

    def _floor(self) -> int:
        return max(self.options.min_workers, self._too_few + 1)

    def _may_retire(self, rates: _Rates) -> bool:
        enough = rates.busy > 0 and rates.workers_for(2 * rates.headroom) < self.active
        return self.workers_tunable and enough and self.active > self._floor()

    def _decided(self, batch: int, reason: str) -> Decision:
        from conveyor.stats.figures import Decision  # loaded with the first change (S4)

        decision = Decision(batch, self.active, self.tasks_in_flight, reason, self.read_ahead)
        log.info(
            "autotune: %d of %d workers, %d tasks in flight, read-ahead %s (%s)",
            self.active,
            self.ceiling,
            decision.tasks_in_flight,
            f"{self.read_ahead} blocks" if self.read_ahead else "the readers' own",
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
