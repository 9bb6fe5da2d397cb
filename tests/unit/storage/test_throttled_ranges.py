"""A store that throttled is asked fewer, larger ranges: it limits requests, not bytes.

Once a host answered 429/503-slow-down, a reader reading on in order asks for up to
`BLOCKS_PER_THROTTLED_REQUEST` blocks per request (within half its widest window), so the
throttles of a start-up burst are paid back in requests; a host that never throttled is
asked block by block, and a seek still reads the right bytes from a shared request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

from scripted_source import FAST, Cut, Late, ScriptedSource, throttle

from conveyor.storage import RangedReader
from conveyor.storage.answers import Answer
from conveyor.storage.ranged import BLOCKS_PER_THROTTLED_REQUEST

BLOCK = 4096
DATA = os.urandom(40 * BLOCK + 123)  # 41 blocks, the last one short


def _spans(source: ScriptedSource) -> list[int]:
    return [(end - start) // BLOCK for start, end in source.requests]


def test_after_a_throttle_each_request_asks_for_several_blocks() -> None:
    source = ScriptedSource(DATA, [throttle(429, 0.0)])
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == DATA
    spans = _spans(source)
    assert spans[:2] == [1, 1]  # block 0 throttled, then asked again
    assert max(spans) == BLOCKS_PER_THROTTLED_REQUEST == 4
    # 41 blocks in 1 + 1 + ~40 / 4 requests, not 42
    assert len(source.requests) <= 2 + 3 + 40 // 4, spans
    covered = sorted(source.requests[1:])
    assert covered[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(covered))


def test_a_host_that_never_throttled_is_asked_block_by_block() -> None:
    source = ScriptedSource(DATA)
    with RangedReader(source, dataclasses.replace(FAST, read_ahead=4), BLOCK) as reader:
        assert reader.read() == DATA
    assert set(_spans(source)) <= {0, 1} and len(source.requests) == 41


def test_the_largest_request_is_half_the_widest_window() -> None:
    source = ScriptedSource(DATA, [throttle(429, 0.0)])
    options = dataclasses.replace(FAST, read_ahead=2, read_ahead_max=4)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == DATA
    assert max(_spans(source)) == 2


def test_seeks_within_and_past_a_shared_request_read_the_right_bytes() -> None:
    source = ScriptedSource(DATA, [throttle(429, 0.0)])
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read(3 * BLOCK) == DATA[: 3 * BLOCK]  # now asking 4 blocks at once
        for offset in (5 * BLOCK + 7, 6 * BLOCK, 30 * BLOCK - 1, 2 * BLOCK, len(DATA) - 5):
            reader.seek(offset)
            assert reader.read(BLOCK + 11) == DATA[offset : offset + BLOCK + 11]
        reader.seek(-100, io.SEEK_END)
        assert reader.read() == DATA[-100:]


def test_a_throttling_host_gets_no_first_window_before_the_size() -> None:
    """On a host known to hold large objects the first window goes out with the first
    block, before the size; once the host throttled, that burst is not sent: the first
    block alone, then requests of several blocks."""
    from conveyor.storage.shared_throttles import note_throttle

    source = ScriptedSource(DATA)
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == DATA  # the host's objects: larger than any window
    note_throttle(source.host)  # a sibling process was throttled by it
    source.requests.clear()
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == DATA
    assert _spans(source)[:2] == [1, 4], _spans(source)


class _TimedSource(ScriptedSource):
    """Records when each request was made (monotonic)."""

    def __init__(self, data: bytes, faults: list[Any]) -> None:
        super().__init__(data, faults)
        self.times: list[float] = []

    async def arequest(self, start: int, end: int, etag: str | None) -> Answer:
        self.times.append(time.monotonic())
        return await super().arequest(start, end, etag)


def _eventually(holds: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not holds():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_blocks_throttled_in_a_burst_are_asked_again_together_after_the_retry_after() -> None:
    """A window sent block by block before the store's first throttle (the start-up burst
    of many workers) is not asked again block by block: its blocks waiting out the
    ``Retry-After`` or for their turn at the pace are asked for with their neighbours in
    larger requests, no sooner than the store said."""
    retry_after = 0.3
    data = DATA[: 24 * BLOCK]
    source = _TimedSource(data, [None] + [throttle(429, retry_after)] * 3)
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read(100) == data[:100]  # the size is known: blocks 1-3 are asked ...
        window = [reader._blocks[index] for index in (1, 2, 3)]
        # ... block 1 is throttled, 2 and 3 wait for their turn at the pace it set
        assert _eventually(lambda: all(b.idle_until is not None for b in window))
        burst = len(source.requests) - 1  # blocks 1-3 sent before the throttle was heard
        assert reader.read() == data[100:]
    assert source.requests[:2] == [(0, BLOCK), (BLOCK, 2 * BLOCK)] and burst >= 1
    first_throttle = source.times[1]
    # block 1 is asked again with its neighbours (one request from it, of 2 blocks or
    # more), after the Retry-After; no block of 1-3 is asked alone more than its burst
    # request and its own retry (one still in flight when the reader regrouped)
    together = [
        i for i, (start, end) in enumerate(source.requests) if start == BLOCK and end >= 3 * BLOCK
    ]
    assert together, source.requests
    assert source.times[together[0]] - first_throttle >= retry_after * 0.9
    for block in (1, 2, 3):
        alone = source.requests.count((block * BLOCK, (block + 1) * BLOCK))
        assert alone <= 2, source.requests


def test_a_block_partly_received_before_a_throttle_is_not_asked_again_whole() -> None:
    """Only blocks with nothing received are regrouped: one cut mid-body and then throttled
    resumes from the byte reached (and the bytes read are right)."""
    data = DATA[: 12 * BLOCK]
    faults = [None, Cut(BLOCK // 2), throttle(429, 0.05)]
    source = ScriptedSource(data, faults)
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == data
    resumed = [start for start, _ in source.requests if start % BLOCK]
    assert resumed and all(start == BLOCK + BLOCK // 2 for start in resumed), source.requests


@dataclasses.dataclass
class _LateThrottle:
    seconds: float
    retry_after: float


class _FaultsByRange(_TimedSource):
    """Each range's first request takes the fault given for its start (None: answered;
    `_LateThrottle`: a throttle that comes ``seconds`` late)."""

    def __init__(self, data: bytes, by_start: dict[int, Any]) -> None:
        super().__init__(data, [])
        self.by_start = dict(by_start)

    async def arequest(self, start: int, end: int, etag: str | None) -> Answer:
        fault = self.by_start.pop(start, None)
        if isinstance(fault, _LateThrottle):
            self.times.append(time.monotonic())
            self.requests.append((start, end))
            await asyncio.sleep(fault.seconds)
            raise throttle(429, fault.retry_after)
        self.faults = [fault]
        return await super().arequest(start, end, etag)


def test_a_throttled_block_between_blocks_in_flight_waits_out_its_own_retry_after() -> None:
    """Only runs of two or more blocks are regrouped: block 1 throttled while block 2 is
    still in flight has no neighbour to share a request with, so it is asked again alone,
    after the ``Retry-After`` (a regrouping that could not ask for it at once left it
    unrequested, and the store's wait unheeded, when the reader came to it)."""
    retry_after = 0.3
    data = DATA[: 12 * BLOCK]
    faults = {BLOCK: _LateThrottle(0.2, retry_after), 2 * BLOCK: Late(3.0)}
    source = _FaultsByRange(data, faults)  # block 2 is asked for before the throttle comes
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read(100) == data[:100]  # blocks 1-3 are asked for
        one, two = reader._blocks[1], reader._blocks[2]
        assert _eventually(lambda: one.idle_until is not None)  # throttled, waiting
        assert two.idle_until is None and not two.complete  # its answer is late
        reader._schedule(0)  # the window planned from block 0 on (as when the size comes)
        assert reader._blocks.get(1) is one  # still asked for, by its own retry
        assert reader.read() == data[100:]
    asked = [source.times[i] for i, r in enumerate(source.requests) if r[0] == BLOCK]
    assert [r for r in source.requests if r[0] == BLOCK] == [(BLOCK, 2 * BLOCK)] * 2
    assert asked[1] - asked[0] >= retry_after * 0.9
