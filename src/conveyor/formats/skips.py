"""Skipped data, counted in samples: `SkipRecord`s, the per-process `SkipSink`, estimates.

Under ``on_error="skip"`` every skip becomes one `SkipRecord`: the shard, the keys known to
be lost, how many samples were lost (``estimated`` when nobody can know exactly, e.g. the
rest of a shard whose server died) and why. Records go to this process's `SkipSink`, from
which the loader's engine drains them after each batch and sends them to the main process,
where one ledger counts them for the whole loader.

Engine recipe (in each worker, after each batch): ``records = skip_sink().drain()``; send
them with the batch; the main process adds ``sum(r.samples for r in records)`` to
``stats().skipped``, applies ``max_skipped`` to that sum and names ``r.url``/``r.keys`` in
its end-of-epoch warning. Workers call ``skip_sink().forward_to_main(True)`` once at start so
their own pipelines stop warning on the worker's stderr.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["SkipRecord", "SkipSink", "drain_skips", "skip_sink"]

MAX_PENDING_RECORDS = 10_000
"""Records kept between drains; past it, records are merged into one (counts kept)."""


class SkipRecord(NamedTuple):
    """One skip: ``samples`` lost from shard ``url`` (``keys``: those known), and why."""

    url: str
    reason: str
    samples: int = 1
    keys: tuple[str, ...] = ()
    estimated: bool = False

    @property
    def key(self) -> str:
        """The first key lost, or ``""`` (the form of the older ``SkippedSample``)."""
        return self.keys[0] if self.keys else ""

    def describe(self) -> str:
        """``"~6 samples of 'shard.tar' (keys 'a', 'b'): reason"``."""
        count = f"{'~' if self.estimated else ''}{self.samples} sample(s)"
        where = f" of {self.url!r}" if self.url else ""
        keys = ""
        if self.keys:
            shown = ", ".join(repr(key) for key in self.keys[:5])
            more = f" and {len(self.keys) - 5} more" if len(self.keys) > 5 else ""
            keys = f" (keys {shown}{more})"
        return f"{count}{where}{keys}: {self.reason}"


class SkipSink:
    """This process's skip records, until drained. Not thread-safe: one pipeline per thread
    adds, the engine drains between batches in the same thread."""

    def __init__(self, max_records: int = MAX_PENDING_RECORDS) -> None:
        self.max_records = max_records
        self.forwarding = False
        self._fetches: list[None] = []
        self._records: list[SkipRecord] = []
        self._loose: list[SkipRecord] = []  # added while no engine drained
        self._pid = os.getpid()

    def _own(self) -> None:
        if self._pid != os.getpid():  # inherited by fork: the parent reports its own records
            self._pid = os.getpid()
            self._records = []
            self._loose = []
            self._fetches = []
            self.forwarding = False

    def forward_to_main(self, forwarding: bool = True) -> None:
        """Say that an engine drains this sink (pipelines then leave warning to it)."""
        self._own()
        self.forwarding = forwarding

    @contextlib.contextmanager
    def forwarded(self) -> Iterator[None]:
        """Forward to the main process for the duration (one batch's fetch), then restore."""
        self._own()
        # one entry per fetch under way: thread workers overlap, and list append/pop are
        # atomic where a saved-and-restored flag could be left on by interleaved threads
        self._fetches.append(None)
        try:
            yield
        finally:
            self._fetches.pop()

    def is_forwarding(self) -> bool:
        """True when an engine drains this sink in this process."""
        self._own()
        return self.forwarding or bool(self._fetches)

    def add(self, record: SkipRecord) -> bool:
        """Keep ``record``; True when an engine will drain it to its main process.

        A record added while no engine drains this sink (a pipeline read outside any loader)
        is kept apart for `drain_skips` only, so the next loader of this process does not
        report it as its own; the pipeline reports it itself (returns False)."""
        self._own()
        forwarded = self.is_forwarding()
        kept = self._records if forwarded else self._loose
        if len(kept) >= self.max_records:
            last = kept.pop()
            record = SkipRecord(
                "",
                "more skips than kept between two drains",
                last.samples + record.samples,
                (),
                last.estimated or record.estimated,
            )
        kept.append(record)
        return forwarded

    def drain(self) -> list[SkipRecord]:
        """The records added since the last drain (in this process), oldest first.

        One ``pop`` at a time: with thread workers several threads add and drain, and a
        record appended while another thread drains is never lost (each pop is atomic)."""
        self._own()
        return _take_all(self._records)

    def drain_loose(self) -> list[SkipRecord]:
        """The records added while no engine drained this sink, oldest first."""
        self._own()
        return _take_all(self._loose)


def _take_all(records: list[SkipRecord]) -> list[SkipRecord]:
    """Empty ``records`` one ``pop`` at a time (atomic against threads appending)."""
    taken: list[SkipRecord] = []
    while records:
        try:
            taken.append(records.pop(0))
        except IndexError:  # drained by another thread in between
            break
    return taken


_SINK = SkipSink()


def skip_sink() -> SkipSink:
    """This process's `SkipSink`."""
    return _SINK


def drain_skips() -> list[SkipRecord]:
    """Every record this process's sink holds: those read outside a loader, then the
    engine's (for inspection and tests; engines drain only their own)."""
    return _SINK.drain_loose() + _SINK.drain()
