"""The doctor's memory finding: copy-on-read in process workers (pytorch#13246).

Pure, as `diagnosis` is. A memory finding is not a bottleneck: it predicts megabytes per
worker saved, not batches per second, so it stands beside the speed verdict instead of
replacing it (a loader can be both too slow and too big, and the speed fix's
counterfactual must change one thing only). It fires when the worker processes' private
memory grew during the measured run and the dataset holds a large Python container the
workers read from their own pages (`containers`).
"""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.doctor.containers import LargeContainer
from conveyor.doctor.diagnosis import LoaderFacts
from conveyor.doctor.measure import Measurement

__all__ = ["GROWTH_MIN_BYTES", "MemoryFinding", "copy_on_read"]

GROWTH_MIN_BYTES = 1 << 20  # mean growth per worker over the run that counts as growing


@dataclass(frozen=True)
class MemoryFinding:
    """Worker memory that a fix saves: ``predicted_saving_bytes`` per worker over a run
    like the measured one (its growth), ``epoch_bytes`` per worker by an epoch's end
    (every item read once: a copy of the container's objects in each worker)."""

    container: LargeContainer
    growth_bytes: float  # measured, mean per worker process
    samples: int  # samples the measured run fetched
    fix: str
    epoch_bytes: int

    @property
    def attribute(self) -> str:
        return self.container.path

    @property
    def replace_with_table(self) -> bool:
        """The counterfactual: the attribute as a StringTable (a container of str/bytes)."""
        return self.container.strings

    @property
    def predicted_saving_bytes(self) -> float:
        """Over a run like the measured one: what the workers grew."""
        return self.growth_bytes

    @property
    def evidence(self) -> str:
        return (
            f"each worker process's private memory grew {self.growth_bytes / 1e6:.1f} MB over "
            f"{self.samples:,} samples: dataset.{self.attribute} is a "
            f"{self.container.described()}, and reading an item writes its reference count, "
            "so its page is copied into the worker (copy-on-read, pytorch#13246); by the "
            f"epoch's end up to ~{self.epoch_bytes / 1e6:.0f} MB per worker"
        )


def copy_on_read(
    run: Measurement, facts: LoaderFacts, containers: list[LargeContainer], share_records: bool
) -> MemoryFinding | None:
    """The largest container to blame for the workers' measured growth, and its fix."""
    if facts.worker_type != "process" or not run.worker_memory or not containers:
        return None
    growth = run.worker_growth_bytes
    if growth < GROWTH_MIN_BYTES:
        return None
    culprit = containers[0]
    name = f"dataset.{culprit.path}"
    if culprit.strings:
        fix = f"{name} = conveyor.StringTable({name}) (one NumPy buffer the workers share)"
        if not share_records:
            fix += "; or share_records=True, which shares lists of plain records by itself"
    elif culprit.numbers:
        fix = f"{name} as a NumPy array (one buffer the workers share, not one object an item)"
    else:
        fix = (
            f"{name} as columns: conveyor.StringTable for its str/bytes fields, NumPy arrays "
            "for its numbers (a list of records, each a Python object, is copied item by item)"
        )
    return MemoryFinding(
        container=culprit,
        growth_bytes=growth,
        samples=run.stats.samples,
        fix=fix,
        epoch_bytes=max(int(growth), culprit.objects_bytes),
    )
