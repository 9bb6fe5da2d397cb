"""What ``loader.stats()`` returns: `LoaderStats`, one epoch's figures read as the verdict
"is the loader the bottleneck?" and a one-line summary.

The counters themselves are `conveyor.stats.counters.StepClock`; this module is imported
when the first snapshot is taken (the loader's import time, S4).
"""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.stats.figures import EpochFigures
from conveyor.stats.verdict import BOTTLENECK_WAIT_SHARE, Verdict, classify

__all__ = ["LoaderStats"]


@dataclass(frozen=True)
class LoaderStats(EpochFigures):
    """A snapshot of the current (or last) epoch, from ``DataLoader.stats()``."""

    def verdict(self) -> Verdict:
        """What limits training, from these counters alone (`conveyor.stats.verdict`);
        ``loader.doctor()`` measures more and predicts what a fix gains."""
        return classify(self)

    @property
    def loader_is_bottleneck(self) -> bool:
        return self.wait_share > BOTTLENECK_WAIT_SHARE

    def _requests_note(self) -> str:
        """Throttles and hedges, when there were any (a store under pressure)."""
        counts = self.requests
        notes = []
        if counts.throttled:
            notes.append(f"the object store throttled {counts.throttled} of them")
        if counts.hedged:
            notes.append(f"{counts.hedged} hedged ({counts.hedge_wins} won)")
        if not notes:
            return ""
        return f", {counts.requests:,} remote requests (" + "; ".join(notes) + ")"

    def summary(self) -> str:
        """One line: throughput, data-wait share, and what limits training."""
        head = (
            f"{self.batches} batches, {self.samples_per_s:,.0f} samples/s, first batch after "
            f"{self.startup_s:.2f} s, then waiting for data {self.wait_share:.0%} of the time"
        )
        if self.workers and self.elapsed_s > 0:
            head += (
                f", {self.ready_share:.0%} of batches ready when asked, "
                f"workers busy {self.workers_busy_share:.0%}"
            )
        head += self._requests_note()
        return f"{head}: {self.verdict().text}"
