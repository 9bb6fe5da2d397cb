"""RangedReader over a scripted source: ranges, retries from the offset reached, final errors.

The source here is an in-memory object whose requests fail as scripted, so every retry
decision is checked without a network; tests/integration/test_remote_faults.py checks the
same against a real misbehaving HTTP server.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any

import pytest

from conveyor.storage import RangedReader, RemoteOptions, RemoteReadError
from conveyor.storage.http_source import HttpStatusError, classify_http
from conveyor.storage.ranged import Answer
from conveyor.storage.retry import Failure, RetryRun

FAST = RemoteOptions(retries=3, backoff_s=0.0, read_timeout_s=1.0)


@dataclass
class Cut:
    """The answer to a request breaks after ``after`` body bytes."""

    after: int


class ScriptedSource:
    """``data`` served by range; each request takes the next fault of ``faults`` (an
    exception to raise, a `Cut`, or None for a good answer)."""

    url = "test://object"

    def __init__(self, data: bytes, faults: list[Any] | None = None, ranges: bool = True):
        self.data = data
        self.faults = list(faults or [])
        self.ranges = ranges
        self.requests: list[tuple[int, int]] = []
        self.open_answers = 0

    def request(self, start: int, end: int, etag: str | None) -> Answer:
        self.requests.append((start, end))
        fault = self.faults.pop(0) if self.faults else None
        if isinstance(fault, BaseException):
            raise fault
        size = len(self.data)
        if not self.ranges:
            start, end = 0, size
        if start >= size:
            return Answer(None, start, start, size)
        end = min(end, size)
        cut = start + fault.after if isinstance(fault, Cut) else None
        self.open_answers += 1
        return Answer({"at": start, "end": end, "cut": cut}, start, end, size, '"etag"')

    def read(self, answer: Answer, at_least: int) -> tuple[bytes, BaseException | None]:
        body = answer.handle
        if body is None:
            return b"", None
        stop = min(body["end"], body["at"] + at_least)
        if body["cut"] is not None and stop >= body["cut"]:
            data = self.data[body["at"] : body["cut"]]
            body["at"] = body["cut"]
            return data, ConnectionResetError("reset by peer")
        data = self.data[body["at"] : stop]
        body["at"] = stop
        return data, None

    def release(self, answer: Answer) -> None:
        if answer.handle is not None:
            self.open_answers -= 1

    def classify(self, error: BaseException) -> Failure:
        return classify_http(error, FAST)


DATA = os.urandom(100_000)


def read_in_pieces(reader: io.BufferedIOBase, sizes: list[int]) -> bytes:
    parts = []
    index = 0
    while True:
        part = reader.read(sizes[index % len(sizes)])
        if not part:
            return b"".join(parts)
        parts.append(part)
        index += 1


def test_reads_in_block_ranges_without_a_request_before_the_first_read() -> None:
    source = ScriptedSource(DATA)
    reader = RangedReader(source, FAST, block_bytes=16_384, fill_bytes=4096)
    assert source.requests == [] and reader.size is None
    assert read_in_pieces(reader, [512, 7, 3000, 20_000]) == DATA
    assert reader.size == len(DATA)
    assert [start for start, _ in source.requests] == list(range(0, len(DATA), 16_384))
    reader.close()
    assert source.open_answers == 0


def test_a_body_cut_short_is_requested_again_from_the_byte_reached() -> None:
    source = ScriptedSource(DATA, [None, Cut(5000), Cut(10)])
    with RangedReader(source, FAST, block_bytes=40_000) as reader:
        assert read_in_pieces(reader, [999]) == DATA
        assert reader.requests_failed == 2
    assert source.requests[:4] == [
        (0, 40_000),
        (40_000, 80_000),
        (45_000, 85_000),
        (45_010, 85_010),
    ]


def test_failures_in_a_row_are_bounded_and_reported_with_status_and_url() -> None:
    error = HttpStatusError(500, "Internal Server Error", ScriptedSource.url)
    source = ScriptedSource(DATA, [error] * 10)
    reader = RangedReader(source, FAST, block_bytes=8192)
    with pytest.raises(RemoteReadError) as caught:
        reader.read(10)
    assert not isinstance(caught.value, FileNotFoundError)
    assert caught.value.status == 500 and caught.value.attempts == 4  # 1 + retries=3
    assert "HTTP 500 Internal Server Error" in str(caught.value)
    assert ScriptedSource.url in str(caught.value) and len(source.requests) == 4


def test_a_completed_range_resets_the_count_of_failures() -> None:
    faults = [Cut(100), Cut(100), Cut(100), None] * 4  # 3 failures, then a whole range
    source = ScriptedSource(DATA[:40_000], faults)
    with RangedReader(source, FAST, block_bytes=10_000) as reader:
        assert reader.read() == DATA[:40_000]
        assert reader.requests_failed == 12


def test_not_found_is_final_and_other_client_errors_are_not_retried() -> None:
    source = ScriptedSource(DATA, [HttpStatusError(404, "Not Found", ScriptedSource.url)])
    with pytest.raises(FileNotFoundError, match="HTTP 404"):
        RangedReader(source, FAST, block_bytes=8192).read(1)
    assert len(source.requests) == 1
    source = ScriptedSource(DATA, [HttpStatusError(403, "Forbidden", ScriptedSource.url)])
    with pytest.raises(RemoteReadError, match="HTTP 403") as caught:
        RangedReader(source, FAST, block_bytes=8192).read(1)
    assert caught.value.status == 403 and len(source.requests) == 1


def test_seeks_read_through_short_gaps_and_request_long_ones() -> None:
    source = ScriptedSource(DATA)
    with RangedReader(source, FAST, block_bytes=50_000, fill_bytes=1000) as reader:
        reader.seek(30_000)  # before any read: no request yet
        assert reader.read(10) == DATA[30_000:30_010] and source.requests == [(30_000, 80_000)]
        reader.seek(40_000)  # ahead within the answer: read through
        assert reader.read(10) == DATA[40_000:40_010] and len(source.requests) == 1
        reader.seek(5)  # behind: a new request
        assert reader.read(10) == DATA[5:15] and source.requests[-1] == (5, 50_005)
        assert reader.seek(-10, io.SEEK_END) == len(DATA) - 10
        assert reader.read() == DATA[-10:]
        assert reader.read(5) == b""


def test_a_server_without_ranges_is_read_through_to_the_offset() -> None:
    source = ScriptedSource(DATA, [None, Cut(30_000)], ranges=False)
    with RangedReader(source, FAST, block_bytes=1 << 20) as reader:
        assert reader.read(20_000) == DATA[:20_000]
        assert reader.read() == DATA[20_000:]


def test_an_empty_object_reads_empty() -> None:
    source = ScriptedSource(b"")
    with RangedReader(source, FAST, block_bytes=1024) as reader:
        assert reader.read(512) == b"" and reader.size == 0


def test_retry_run_backoff_doubles_with_jitter_within_the_budget() -> None:
    options = RemoteOptions(retries=10, backoff_s=1.0, backoff_max_s=4.0, retry_budget_s=9.0)
    now = [0.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    run = RetryRun(options, "u", clock=lambda: now[0], sleep=sleep)
    with pytest.raises(RemoteReadError, match="gave up after"):
        for _ in range(11):
            run.failed(Failure("connection refused", retryable=True), 0)
    caps = [1.0, 2.0, 4.0, 4.0]
    assert all(cap / 2 <= wait <= cap for wait, cap in zip(waits, caps, strict=False))
    assert sum(waits) <= 9.0 and len(waits) < 10  # the budget, not the count, ended it


def test_remote_options_validate_and_read_the_environment() -> None:
    assert RemoteOptions.from_env({}) == RemoteOptions()
    env = {"CONVEYOR_REMOTE_READ_TIMEOUT_S": "2.5", "CONVEYOR_REMOTE_RETRIES": "0"}
    assert RemoteOptions.from_env(env) == RemoteOptions(read_timeout_s=2.5, retries=0)
    with pytest.raises(ValueError, match="CONVEYOR_REMOTE_RETRIES"):
        RemoteOptions.from_env({"CONVEYOR_REMOTE_RETRIES": "many"})
    with pytest.raises(ValueError, match="retries"):
        RemoteOptions(retries=-1)
    with pytest.raises(ValueError, match="read_timeout_s"):
        RemoteOptions(read_timeout_s=0)
