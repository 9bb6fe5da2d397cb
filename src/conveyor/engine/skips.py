"""The ``on_error="skip"`` policy's ledger: count bad samples, stop at a limit, report."""

from __future__ import annotations

import warnings
from typing import Any

from conveyor.formats.errors import BadSampleWarning

EXAMPLES_KEPT = 5


class SkipLog:
    """Bad samples dropped this epoch. Nothing is skipped silently: past ``max_skipped``
    loading stops with an error, and the end of the epoch warns with a summary."""

    def __init__(self, max_skipped: int | None):
        self.max_skipped = max_skipped
        self.count = 0
        self.examples: list[tuple[Any, str]] = []

    def record(self, skips: tuple[tuple[Any, str], ...]) -> None:
        if not skips:
            return
        self.count += len(skips)
        room = EXAMPLES_KEPT - len(self.examples)
        if room > 0:
            self.examples += skips[:room]
        if self.max_skipped is not None and self.count > self.max_skipped:
            raise RuntimeError(
                f"DataLoader skipped {self.count} bad samples, more than max_skipped="
                f"{self.max_skipped}; first ones: {self._examples()}. Fix the data, or raise "
                "max_skipped if this many bad samples is expected."
            )

    def _examples(self) -> str:
        return "; ".join(f"index {index!r}: {error}" for index, error in self.examples)

    def report(self) -> None:
        """At the end of an epoch: one warning that says what was dropped."""
        if self.count:
            warnings.warn(
                f"DataLoader skipped {self.count} bad samples this epoch "
                f"(on_error='skip'); first ones: {self._examples()}",
                BadSampleWarning,
                stacklevel=3,
            )
