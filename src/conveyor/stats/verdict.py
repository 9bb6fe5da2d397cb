"""The verdict of ``stats().summary()``: what limits training, from the counters alone.

A high data-wait share alone does not make the workers the bottleneck: when batches were
ready before the loop asked and the workers sat mostly idle, the time inside ``next()``
went to the main process taking batches in (receiving, unpickling, pinning, GC pauses),
and more workers would not help. So the verdict reads the wait share together with the
ready share, the workers' busy share and how much of their busy time was on a CPU.
``loader.doctor()`` (`conveyor.doctor`) starts from the same kinds and measures further.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor.stats.figures import EpochFigures

__all__ = ["BOTTLENECK_WAIT_SHARE", "BUSY_SHARE", "READY_SHARE", "Verdict", "classify"]

BOTTLENECK_WAIT_SHARE = 0.10  # the loop waits in next() above this share of its time: loader-bound
BUSY_SHARE = 0.6  # workers busy at least this share of the time: they limit the loader
READY_SHARE = 0.8  # batches ready when asked at least this often: workers keep ahead
CPU_SHARE = 0.5  # below this share of busy time on a CPU, workers mostly wait (I/O, GIL)
STRAGGLER_RATIO = 4.0  # a task this many times the mean holds an in-order loader back
STEP_SHARING_CPU = 0.3  # workers on a CPU this share of the loop's time: they may slow it
PIN_BUSY_SHARE = 0.7  # pinning busy this share of the time per batch: it sets the pace

# The kinds, in words a log line can carry (`Verdict.kind`).
PIN = "pin memory"
NOTHING, STEP, IN_LOOP, MAIN_PROCESS, WORKERS_CPU, WORKERS_WAIT, STRAGGLER, SHALLOW = (
    "nothing loaded",
    "training step",
    "loading in the training loop",
    "main process",
    "workers (CPU)",
    "workers (waiting)",
    "slow batches",
    "prefetch depth",
)


@dataclass(frozen=True)
class Verdict:
    """What limits training: ``kind`` (one of this module's names), whether that is the
    loader, and one sentence saying so with what to do."""

    kind: str
    loader_bound: bool
    text: str


def classify(stats: EpochFigures) -> Verdict:
    """The verdict for one epoch's counters (see the module docstring for the rules); with
    ``profile_stages``, whatever the verdict, it ends naming the slowest stage."""
    verdict = _classify(stats)
    return Verdict(verdict.kind, verdict.loader_bound, verdict.text + _stage(stats))


def _classify(stats: EpochFigures) -> Verdict:
    if not stats.batches:
        return Verdict(NOTHING, False, "nothing loaded yet")
    if stats.wait_share <= BOTTLENECK_WAIT_SHARE:
        return Verdict(STEP, False, _keeps_up(stats))
    if not stats.workers:
        text = "the loader is the bottleneck (it loads in the training loop's process)"
        return Verdict(IN_LOOP, True, text + ": add workers (num_workers > 0)")
    period = stats.elapsed_s / stats.batches
    if stats.pins and stats.pin_s / stats.pins >= PIN_BUSY_SHARE * period:
        return Verdict(
            PIN,
            True,
            f"the loader is the bottleneck: pinning takes {1e3 * stats.pin_s / stats.pins:.1f} "
            f"ms per batch, one batch every {period * 1e3:.1f} ms; one thread pins every batch, "
            "so more workers would not help: pin less or make pin_memory() cheaper",
        )
    straggler = _straggler(stats)
    if straggler is not None:  # before the ready share: most batches are ready, in order
        return straggler
    busy = stats.workers_busy_share
    ready_wait = stats.ready_wait_s / stats.wait_s if stats.wait_s > 0 else 0.0
    if busy < BUSY_SHARE and (stats.ready_share >= READY_SHARE or ready_wait >= 0.5):
        return Verdict(
            MAIN_PROCESS,
            True,
            "batches were ready when asked and the workers mostly idle, so the workers are "
            "not the bottleneck and more workers would not help: the wait is the main "
            "process taking batches in (receiving, pinning, GC pauses); loader.doctor() "
            "measures where it goes",
        )
    if busy >= BUSY_SHARE:
        return _workers_busy(stats)
    return Verdict(
        SHALLOW,
        True,
        "the loader is the bottleneck while its workers idle: too few batches in flight; "
        "raise prefetch_factor",
    )


def _keeps_up(stats: EpochFigures) -> str:
    """The loop hardly waits; workers busy on a CPU may still slow the step itself."""
    text = "the loader keeps up; the training step is the bottleneck"
    cpu_s = sum(w.cpu_s for w in stats.workers)
    if stats.elapsed_s > 0 and cpu_s >= STEP_SHARING_CPU * stats.elapsed_s:
        text += (
            f", though the workers were on a CPU {cpu_s / stats.elapsed_s:.0%} of the time: "
            "thread workers hold the GIL the step needs, and any worker takes CPU a CPU-bound "
            "step could use; loader.doctor() times the step alone"
        )
    return text


def _straggler(stats: EpochFigures) -> Verdict | None:
    mean = sum(w.busy_s for w in stats.workers) / max(1, sum(w.batches for w in stats.workers))
    longest = max(w.longest_s for w in stats.workers)
    if mean > 0 and longest >= STRAGGLER_RATIO * mean and stats.mean_held_while_waiting >= 1:
        return Verdict(
            STRAGGLER,
            True,
            f"the loader is the bottleneck: a few slow batches (up to {longest * 1e3:.0f} ms "
            f"against {mean * 1e3:.1f} ms on average) hold the others back; in_order=False "
            "hands out the ready ones first",
        )
    return None


def _workers_busy(stats: EpochFigures) -> Verdict:
    busy_s = sum(w.busy_s for w in stats.workers)
    cpu_share = sum(w.cpu_s for w in stats.workers) / busy_s if busy_s > 0 else 1.0
    batches = sum(w.batches for w in stats.workers)
    per_batch_ms = 1e3 * busy_s / max(1, batches)
    if cpu_share < CPU_SHARE:
        return Verdict(
            WORKERS_WAIT,
            True,
            f"the loader is the bottleneck: workers busy {per_batch_ms:.1f} ms "
            f"per batch but on a CPU only {cpu_share:.0%} of it (waiting on I/O, on the GIL "
            "with thread workers, or for a CPU the machine is short of): add workers or read "
            "ahead if CPUs are free",
        )
    slowest = stats.slowest_worker()
    worker = "" if slowest is None else f"; slowest worker {slowest.worker_id}"
    return Verdict(
        WORKERS_CPU,
        True,
        f"the loader is the bottleneck (workers busy {per_batch_ms:.1f} ms per batch{worker}): "
        "add workers or make __getitem__/collate cheaper",
    )


def _stage(stats: EpochFigures) -> str:
    """``profile_stages``' answer, phrased to end any verdict; empty without it."""
    stage = stats.slowest_stage()
    if stage is None:
        return ""
    return f"; slowest stage: {stage.name} ({stage.self_s:.2f} s of work)"
