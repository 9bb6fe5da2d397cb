"""RangedReader over a scripted source: its window, retries from the offset reached, seeks,
the end of the object, and its final errors."""

from __future__ import annotations

import dataclasses
import io
import os
import time

import pytest
from scripted_source import FAST, Cut, Hang, Late, ScriptedSource

from conveyor.storage import RangedReader, RemoteOptions, RemoteReadError
from conveyor.storage.http_source import HttpStatusError
from conveyor.storage.request_tally import request_counts

DATA = os.urandom(100_000)
ONE_AT_A_TIME = dataclasses.replace(FAST, read_ahead=0)


def read_in_pieces(reader: io.RawIOBase, sizes: list[int]) -> bytes:
    parts = []
    index = 0
    while True:
        part = reader.read(sizes[index % len(sizes)])
        if not part:
            return b"".join(parts)
        parts.append(part)
        index += 1


@pytest.mark.parametrize("read_ahead", [0, 3])
@pytest.mark.parametrize("chunk", [1, 511, 4096, 16_384, 16_385, -1])
def test_reads_return_the_object_whatever_the_read_size(read_ahead: int, chunk: int) -> None:
    source = ScriptedSource(DATA[:50_000])
    options = dataclasses.replace(FAST, read_ahead=read_ahead)
    with RangedReader(source, options, block_bytes=16_384) as reader:
        assert source.requests == [] and reader.size is None  # nothing before the first read
        assert read_in_pieces(reader, [chunk]) == DATA[:50_000]
        assert reader.size == 50_000 and reader.read(10) == b""
    blocks = [(s, min(s + 16_384, 50_000)) for s in range(0, 50_000, 16_384)]
    assert sorted(source.requests) == blocks
    assert source.open_answers == 0


def test_the_window_keeps_depth_blocks_in_flight_and_nothing_past_the_end() -> None:
    source = ScriptedSource(DATA)
    options = dataclasses.replace(FAST, read_ahead=3, read_ahead_max=3)
    with RangedReader(source, options, block_bytes=10_000) as reader:
        assert reader.read(10) == DATA[:10]
        deadline = time.monotonic() + 5
        while len(source.requests) < 3:  # the others go out once the first said the size
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert sorted(source.requests) == [(0, 10_000), (10_000, 20_000), (20_000, 30_000)]
        assert read_in_pieces(reader, [3333]) == DATA[10:]
    assert len(source.requests) == 10  # ten blocks, none past the end


def test_the_window_widens_when_the_reader_reaches_a_block_still_arriving() -> None:
    from scripted_source import Late

    source = ScriptedSource(DATA, [None] + [Late(0.05)] * 20)
    options = dataclasses.replace(FAST, read_ahead=1, read_ahead_max=4)
    with RangedReader(source, options, block_bytes=10_000) as reader:
        assert reader.depth == 1
        assert read_in_pieces(reader, [4096]) == DATA
        assert reader.depth == 4  # doubled twice, and no further
    assert len(source.requests) == 10


def test_a_body_cut_short_is_requested_again_from_the_byte_reached() -> None:
    source = ScriptedSource(DATA, [None, Cut(5000), Cut(10)])
    with RangedReader(source, ONE_AT_A_TIME, block_bytes=40_000) as reader:
        assert read_in_pieces(reader, [999]) == DATA
    cut_twice = [(0, 40_000), (40_000, 80_000), (45_000, 80_000), (45_010, 80_000)]
    assert source.requests[:4] == cut_twice


def test_failures_in_a_row_are_bounded_and_reported_with_status_and_url() -> None:
    error = HttpStatusError(500, "Internal Server Error", ScriptedSource.url)
    source = ScriptedSource(DATA, [error] * 10)
    reader = RangedReader(source, ONE_AT_A_TIME, block_bytes=8192)
    with pytest.raises(RemoteReadError) as caught:
        reader.read(10)
    reader.close()
    assert not isinstance(caught.value, FileNotFoundError)
    assert caught.value.status == 500 and caught.value.attempts == 4  # 1 + retries=3
    assert caught.value.offset == 0 and "at byte 0" in str(caught.value)
    assert "HTTP 500 Internal Server Error" in str(caught.value)
    assert ScriptedSource.url in str(caught.value) and len(source.requests) == 4


def test_a_completed_range_resets_the_count_of_failures() -> None:
    faults = [Cut(100), Cut(100), Cut(100), None] * 4  # 3 failures, then a whole range
    source = ScriptedSource(DATA[:40_000], faults)
    with RangedReader(source, ONE_AT_A_TIME, block_bytes=10_000) as reader:
        assert reader.read() == DATA[:40_000]
    assert len(source.requests) == 16


def test_not_found_is_final_and_other_client_errors_are_not_retried() -> None:
    source = ScriptedSource(DATA, [HttpStatusError(404, "Not Found", ScriptedSource.url)])
    with (
        RangedReader(source, FAST, block_bytes=8192) as reader,
        pytest.raises(FileNotFoundError, match="HTTP 404"),
    ):
        reader.read(1)
    assert len(source.requests) == 1
    source = ScriptedSource(DATA, [HttpStatusError(403, "Forbidden", ScriptedSource.url)])
    with (
        RangedReader(source, FAST, block_bytes=8192) as reader,
        pytest.raises(RemoteReadError, match="HTTP 403") as caught,
    ):
        reader.read(1)
    assert caught.value.status == 403 and len(source.requests) == 1


def test_a_seek_before_the_first_read_starts_there_and_later_seeks_move_the_window() -> None:
    source = ScriptedSource(DATA)
    with RangedReader(source, ONE_AT_A_TIME, block_bytes=50_000) as reader:
        reader.seek(30_000)  # before any read (a resumed shard): no request yet
        assert source.requests == []
        assert reader.read(10) == DATA[30_000:30_010] and source.requests == [(30_000, 80_000)]
        reader.seek(40_000)  # ahead within the block: no new request
        assert reader.read(10) == DATA[40_000:40_010] and len(source.requests) == 1
        reader.seek(5)  # behind: a new request from there
        assert reader.read(10) == DATA[5:15] and source.requests[-1] == (5, 50_005)
        assert reader.seek(-10, io.SEEK_END) == len(DATA) - 10
        assert reader.read() == DATA[-10:]
        assert reader.read(5) == b""


def test_a_server_without_ranges_is_read_through_to_the_offset() -> None:
    source = ScriptedSource(DATA, [None, Cut(30_000)], ranges=False)
    with RangedReader(source, ONE_AT_A_TIME, block_bytes=1 << 20) as reader:
        assert reader.read(20_000) == DATA[:20_000]
        assert reader.read() == DATA[20_000:]


def test_an_empty_object_reads_empty() -> None:
    source = ScriptedSource(b"")
    with RangedReader(source, FAST, block_bytes=1024) as reader:
        assert reader.read(512) == b"" and reader.size == 0


def test_close_cancels_the_window_and_closes_every_answer() -> None:
    from scripted_source import Late

    source = ScriptedSource(DATA, [None] + [Late(0.2)] * 5)
    reader = RangedReader(source, dataclasses.replace(FAST, read_ahead=4), block_bytes=10_000)
    assert reader.read(10) == DATA[:10]
    reader.close()
    deadline = time.monotonic() + 5
    while source.in_flight or source.open_answers:
        assert time.monotonic() < deadline, "a cancelled request kept its answer"
        time.sleep(0.01)


def test_the_retry_budget_bounds_the_whole_wait_of_a_hanging_server() -> None:
    """Attempts that time out after 0.4 s each; the budget of 1 s ends the read at 1 s
    from the first failed request's start, the attempt then in progress cut short."""
    options = RemoteOptions(read_timeout_s=0.4, retries=50, backoff_s=0.01, retry_budget_s=1.0)
    source = ScriptedSource(DATA, [Hang(0.4)] * 50)
    started = time.monotonic()
    with (
        RangedReader(source, options, block_bytes=8192) as reader,
        pytest.raises(RemoteReadError) as caught,
    ):
        reader.read(10)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed <= 1.0 + 0.5, elapsed  # not 1 s + a last read timeout
    assert "gave up after" in str(caught.value) and "at byte 0" in str(caught.value)
    assert caught.value.attempts == len(source.requests) == 3


def test_the_time_waited_for_blocks_is_counted_for_stats() -> None:
    """One block at a time, each answered 20 ms late: the reader waits for each of the
    three, and ``stats().requests`` gets the object, the waits and their time."""
    source = ScriptedSource(DATA[:30_000], [Late(0.02)] * 3)
    before = request_counts()
    with RangedReader(source, ONE_AT_A_TIME, block_bytes=10_000) as reader:
        assert reader.read() == DATA[:30_000]
    counted = request_counts() - before
    assert counted.objects == 1 and counted.requests == 3
    assert counted.read_waits >= 3 and counted.read_wait_s >= 3 * 0.02 * 0.9
