"""One iteration of a Mixture: its readers, the position reached, and where it stops.

Where the mixture stops depends only on where each source first runs out (``first end``):
``first_exhausted`` stops at the earliest first end, ``all_exhausted`` at the latest once
every source still scheduled has run out, ``never`` does not stop. A map-style source's
first end is computed from the schedule (the position of its item number ``len``); a
stream's is found by reading (the position of item ``L``, its first pass's length). So a
replica that produces only some positions still stops exactly where a single process
would: it brings the streams up to its next position before producing it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from conveyor.mixture.placement import Placement
from conveyor.mixture.schedule import Schedule
from conveyor.mixture.sources import MapSource, StreamSource

__all__ = ["STOP_MODES", "MixtureRun"]

STOP_MODES = ("first_exhausted", "all_exhausted", "never")
_NEVER = math.inf
_VECTORISE_FROM = 64  # positions of one map-style source in a block worth one NumPy pass


class MixtureRun:
    """Produces the samples of one replica's positions from ``start`` on."""

    def __init__(
        self,
        schedule: Schedule,
        readers: Sequence[MapSource | StreamSource],
        *,
        stop_on: str,
        placement: Placement,
        start: int,
    ) -> None:
        self._schedule = schedule
        self.readers = readers
        self._stop_on = stop_on
        self._placement = placement
        self.position = start  # the next position to produce; all below are done
        self._start = start
        self._version = 0
        self._stop: float = self._stop_position()
        self.stopped = False

    def follow(self, schedule: Schedule) -> None:
        """A new weight history (a worker told by its loader): use it from now on."""
        self._schedule = schedule
        self.schedule_changed()

    def schedule_changed(self) -> None:
        """The weights changed: blocks computed before are stale and the stop may move."""
        self._version += 1
        self._stop = self._stop_position()

    def samples(self) -> Iterator[Any]:
        for begin, end in self._placement.ranges(self._start):
            if begin != self.position:
                self._catch_up(begin)
            yield from self._produce(end)
            if self.stopped:
                return

    def _produce(self, end: int) -> Iterator[Any]:
        while self.position < end:
            version = self._version
            sources, items = self._schedule.locate(self.position, end)
            indices = self._map_indices(sources, items)
            for source, item, index in zip(sources.tolist(), items.tolist(), indices, strict=True):
                if self.position >= self._stop:
                    self.stopped = True
                    return
                if index >= 0:
                    found, sample = True, self.readers[source].fetch(index)
                else:
                    found, sample = self._read(source, item)
                if not found:
                    self.stopped = True
                    return
                self.position += 1
                yield sample
                if self._version != version:
                    break  # set_weights while the consumer held the sample

    def _map_indices(self, sources: NDArray[np.int64], items: NDArray[np.int64]) -> list[int]:
        """Dataset indices for the block's map-style positions (-1 elsewhere): a source with
        many positions in the block gets its permutation evaluated in one NumPy pass; the
        others are evaluated one by one as they are read."""
        out = np.full(sources.size, -1, dtype=np.int64)
        present = np.bincount(sources, minlength=len(self.readers))
        for number in np.flatnonzero(present >= _VECTORISE_FROM).tolist():
            reader = self.readers[number]
            if isinstance(reader, MapSource) and reader.length:
                where = np.flatnonzero(sources == number)
                out[where] = reader.indices(items[where])
        return out.tolist()

    def _read(self, source: int, item: int) -> tuple[bool, Any]:
        reader = self.readers[source]
        found, sample = reader.read(item)
        if found:
            return True, sample
        # A stream ran out at this position: its first end may be where the mixture stops.
        assert isinstance(reader, StreamSource)
        self._stop = self._stop_position()
        if self.position >= self._stop:
            return False, None
        reader.start_next_pass()
        return reader.read(item)

    def _catch_up(self, begin: int) -> None:
        """A replica skips to ``begin``: streams read on to their counts there, so that
        their ends before ``begin`` are known (map-style sources need nothing)."""
        counts = self._schedule.counts_before(begin).tolist()
        for number, reader in enumerate(self.readers):
            if isinstance(reader, StreamSource):
                reader.skip_to(counts[number])
        self.position = begin
        self._stop = self._stop_position()

    def _stop_position(self) -> float:
        if self._stop_on == "never":
            return _NEVER
        ends: list[float] = []
        for number, reader in enumerate(self.readers):
            if isinstance(reader, MapSource):
                length: int | None = reader.length
            else:
                length = reader.first_pass_length
            if length is None:  # a stream still in its first pass
                if self._stop_on == "all_exhausted" and self._schedule.rates.shares[number]:
                    return _NEVER
                continue
            end = self._schedule.position_of(number, length)
            if end is not None:
                ends.append(end)
        if not ends:
            return _NEVER
        return min(ends) if self._stop_on == "first_exhausted" else max(ends)
