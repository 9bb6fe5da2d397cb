"""The ``on_error="skip"`` policy's ledger in the main process: count, limit, report.

Every skip, wherever it happened (a map-style ``__getitem__`` that raised, a tar shard
cut short in a worker, a remote read that gave up), arrives here as a `SkipRecord` with the
batch it came with, so one ledger counts *samples lost* for the whole loader: the limit
``max_skipped`` applies to all workers together and one warning at the end of the epoch,
in the main process, names the count, the shards and the keys.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

from conveyor.formats.errors import BadSampleWarning
from conveyor.formats.skips import SkipRecord

EXAMPLES_KEPT = 5


class SkipLog:
    """Samples lost this epoch. Nothing is skipped silently: past ``max_skipped`` loading
    stops with an error, and the end of the epoch warns with a summary."""

    def __init__(self, max_skipped: int | None):
        self.max_skipped = max_skipped
        self.count = 0  # samples lost
        self.estimated = False  # some count is an estimate (the rest of a cut shard)
        self.examples: list[SkipRecord] = []

    def record(self, records: Iterable[SkipRecord]) -> int:
        """Add ``records``; returns the samples they lost."""
        lost = 0
        for record in records:
            lost += record.samples
            self.estimated = self.estimated or record.estimated
            if len(self.examples) < EXAMPLES_KEPT:
                self.examples.append(record)
        self.count += lost
        if self.max_skipped is not None and self.count > self.max_skipped:
            raise RuntimeError(
                f"DataLoader skipped {self._count()} samples, more than max_skipped="
                f"{self.max_skipped}; first ones: {self._examples()}. Fix the data, or raise "
                "max_skipped if this many bad samples is expected."
            )
        return lost

    def _count(self) -> str:
        return f"{'~' if self.estimated else ''}{self.count}"

    def _examples(self) -> str:
        return "; ".join(map(_describe, self.examples))

    def report(self) -> None:
        """At the end of an epoch: one warning that says what was dropped."""
        if self.count:
            warnings.warn(
                f"DataLoader skipped {self._count()} samples this epoch (on_error='skip'); "
                f"first ones: {self._examples()}",
                BadSampleWarning,
                stacklevel=3,
            )


def _describe(record: SkipRecord) -> str:
    """``index 7: OSError: ...`` for one map-style sample, else the record's own words."""
    if not record.url and record.samples == 1 and len(record.keys) == 1:
        return f"{record.keys[0]}: {record.reason}"
    return record.describe()
