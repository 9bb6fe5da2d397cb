"""What ``loader.doctor()`` returns: the measurements, the verdict, predicted vs measured."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from conveyor.doctor.diagnosis import Diagnosis, LoaderFacts
from conveyor.doctor.measure import Measurement
from conveyor.doctor.memory import MemoryFinding
from conveyor.stats.requests import RequestCounts

__all__ = ["Counterfactual", "DoctorReport", "MemoryCounterfactual"]


@dataclass(frozen=True)
class Counterfactual:
    """The short run with the fix applied."""

    run: Measurement
    period_s: float  # measured with the fix

    def gain_over(self, before_s: float) -> float:
        return before_s / self.period_s - 1 if self.period_s > 0 else 0.0


@dataclass(frozen=True)
class MemoryCounterfactual:
    """The memory fix tried: the workers' growth over the same run with it, or why not."""

    growth_bytes: float | None  # mean per worker process with the fix; None: not run
    note: str  # what the run changed, or why it did not run

    def saving_over(self, before_bytes: float) -> float | None:
        return None if self.growth_bytes is None else before_bytes - self.growth_bytes


@dataclass(frozen=True)
class DoctorReport:
    """``loader.doctor()``: print it (``text()``) or keep it (``as_dict()``, ``to_json()``)."""

    facts: LoaderFacts
    run: Measurement
    floor_s: float  # the step alone, per batch (headspace)
    diagnosis: Diagnosis
    counterfactual: Counterfactual | None
    duration_s: float
    memory: MemoryFinding | None = None  # beside the speed verdict: MB, not batches/s
    memory_counterfactual: MemoryCounterfactual | None = None

    @property
    def bottleneck(self) -> str:
        return self.diagnosis.bottleneck

    @property
    def measured_gain(self) -> float | None:
        after = self.counterfactual
        return None if after is None else after.gain_over(self.run.period_s)

    def as_dict(self) -> dict[str, Any]:
        run, stats, diagnosis = self.run, self.run.stats, self.diagnosis
        return {
            "loader": vars(self.facts),
            "period_ms": run.period_s * 1e3,
            "step_floor_ms": self.floor_s * 1e3,
            "wait_share": stats.wait_share,
            "ready_share": stats.ready_share,
            "mean_in_flight": stats.mean_in_flight,
            "bytes_per_batch": stats.bytes_moved / max(1, stats.batches),
            "gc_pause_ms": run.gc_pause_s * 1e3,
            "gc_collections": run.gc_collections,
            "main_process_cores": run.main_cpu_s / run.wall_s if run.wall_s else 0.0,
            "workers": [
                {
                    "worker_id": w.worker_id,
                    "batches": w.batches,
                    "busy_share": _busy_share(w.busy_s, run),
                    "cpu_ms_per_batch": 1e3 * w.cpu_s / max(1, w.batches),
                    "busy_ms_per_batch": 1e3 * w.busy_s / max(1, w.batches),
                    "collate_ms_per_batch": 1e3 * w.collate_s / max(1, w.batches),
                    "longest_ms": 1e3 * w.longest_s,
                }
                for w in stats.workers
            ],
            "bottleneck": diagnosis.bottleneck,
            "evidence": diagnosis.evidence,
            "fix": diagnosis.fix.description,
            "fix_changes": diagnosis.fix.changes,
            "fix_read_ahead": diagnosis.fix.read_ahead or None,
            "predicted_gain": diagnosis.predicted_gain,
            "measured_gain": self.measured_gain,
            "measured_period_ms_with_fix": (
                None if self.counterfactual is None else self.counterfactual.period_s * 1e3
            ),
            "remote": _remote_dict(stats.requests, run),
            "worker_private_mb": [
                [start / 1e6, end / 1e6] for start, end in self.run.worker_memory
            ],
            "memory": self._memory_dict(),
            "duration_s": self.duration_s,
        }

    def _memory_dict(self) -> dict[str, Any] | None:
        finding, after = self.memory, self.memory_counterfactual
        if finding is None:
            return None
        container = finding.container
        saving = None if after is None else after.saving_over(finding.growth_bytes)
        return {
            "finding": "copy-on-read",
            "attribute": finding.attribute,
            "container": {
                "kind": container.kind,
                "length": container.length,
                "item_types": list(container.item_types),
                "objects_mb": container.objects_bytes / 1e6,
            },
            "evidence": finding.evidence,
            "fix": finding.fix,
            "growth_mb_per_worker": finding.growth_bytes / 1e6,
            "predicted_saving_mb_per_worker": finding.predicted_saving_bytes / 1e6,
            "epoch_mb_per_worker": finding.epoch_bytes / 1e6,
            "measured_growth_mb_per_worker_with_fix": (
                None if after is None or after.growth_bytes is None else after.growth_bytes / 1e6
            ),
            "measured_saving_mb_per_worker": None if saving is None else saving / 1e6,
            "counterfactual_note": None if after is None else after.note,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, default=str)

    def text(self) -> str:
        run, stats, d = self.run, self.run.stats, self.diagnosis
        facts = self.facts
        lines = [
            f"conveyor doctor: {facts.num_workers} {facts.worker_type} workers, "
            f"in_order={facts.in_order}, prefetch_factor={facts.prefetch_factor}, "
            f"{facts.cpus} CPUs",
            f"  one batch every {run.period_s * 1e3:.1f} ms; the step alone (headspace, "
            f"cached batches): {self.floor_s * 1e3:.1f} ms",
            f"  waiting for data {stats.wait_share:.0%}; {stats.ready_share:.0%} of batches "
            f"ready when asked; {stats.mean_in_flight:.1f} tasks in flight on average",
            f"  main process: {run.main_cpu_s / max(run.wall_s, 1e-9):.2f} cores; "
            f"GC paused it {run.gc_pause_s * 1e3:.0f} ms ({run.gc_collections} collections); "
            f"{stats.bytes_moved / max(1, stats.batches) / 1e3:.0f} kB per batch crossed",
        ]
        remote = _remote_dict(stats.requests, run)
        if remote is not None:
            lines.append(
                f"  remote: {remote['requests']:,} requests for {remote['objects']:,} objects; "
                f"readers waited {remote['read_wait_ms_per_batch']:.1f} ms per batch "
                f"({remote['read_waits']:,} waits)"
            )
        for w in stats.workers:
            per = max(1, w.batches)
            lines.append(
                f"  worker {w.worker_id}: busy {_busy_share(w.busy_s, run):.0%}, "
                f"{1e3 * w.busy_s / per:.1f} ms per batch ({1e3 * w.cpu_s / per:.1f} on a CPU, "
                f"{1e3 * w.collate_s / per:.1f} collating), longest {1e3 * w.longest_s:.1f} ms"
            )
        lines += [
            f"bottleneck: {d.bottleneck}: {d.evidence}",
            f"top fix: {d.fix.description}; predicted gain {d.predicted_gain:+.0%}",
        ]
        after = self.counterfactual
        if after is not None:
            lines.append(
                f"counterfactual: one batch every {after.period_s * 1e3:.1f} ms with the fix: "
                f"predicted {d.predicted_gain:+.0%}, measured {after.gain_over(run.period_s):+.0%}"
            )
        lines += self._memory_lines()
        lines.append(f"(doctor took {self.duration_s:.1f} s)")
        return "\n".join(lines)

    def _memory_lines(self) -> list[str]:
        finding, after = self.memory, self.memory_counterfactual
        if finding is None:
            return []
        predicted = finding.predicted_saving_bytes / 1e6
        lines = [
            f"memory (a memory finding, beside the speed verdict): {finding.evidence}",
            f"memory fix: {finding.fix}; predicted saving {predicted:.1f} MB per worker over "
            f"this run (~{finding.epoch_bytes / 1e6:.0f} MB by the epoch's end), no speed gain",
        ]
        if after is not None:
            saving = after.saving_over(finding.growth_bytes)
            if saving is None or after.growth_bytes is None:
                lines.append(f"memory counterfactual: not run: {after.note}")
            else:
                lines.append(
                    f"memory counterfactual ({after.note}): workers grew "
                    f"{after.growth_bytes / 1e6:.1f} MB each: predicted saving {predicted:.1f} "
                    f"MB per worker, measured {saving / 1e6:.1f} MB"
                )
        return lines

    def __str__(self) -> str:
        return self.text()


def _remote_dict(counts: RequestCounts, run: Measurement) -> dict[str, Any] | None:
    """The run's remote reads (None without any): what the ``remote reads`` verdict weighs."""
    if not counts.requests:
        return None
    tasks = max(1, sum(w.batches for w in run.stats.workers) or run.stats.batches)
    return {
        "requests": counts.requests,
        "objects": counts.objects,
        "read_waits": counts.read_waits,
        "read_wait_ms_per_batch": counts.read_wait_s * 1e3 / tasks,
        "throttled": counts.throttled,
        "hedged": counts.hedged,
    }


def _busy_share(busy_s: float, run: Measurement) -> float:
    """A worker's busy time over the run, its first batch (start-up) included as its busy
    time is."""
    total = run.wall_s + run.stats.startup_s
    return min(1.0, busy_s / total) if total > 0 else 0.0
