"""The first window of an object: asked for at once on a host known to hold large objects
(not block after block once the first answer said the size), and nothing past the end of a
small one; the early blocks of an object that fails end with its error and close."""

from __future__ import annotations

import dataclasses
import os

import pytest
from scripted_source import FAST, Held, ScriptedSource

from conveyor.storage import RangedReader

DATA = os.urandom(100_000)
BLOCK = 10_000


def test_a_host_of_large_objects_gets_the_first_window_before_the_size() -> None:
    """Blocks after the first do not wait a round trip for the first answer's size."""
    source = ScriptedSource(DATA)
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=4)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == DATA  # the host's objects: 10 blocks or more
    source.requests.clear()
    first = Held()
    source.faults = [first]  # the next object's first answer waits until released
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        reader.start()
        assert source.wait_until(lambda: len(source.requests) >= 4), source.requests
        assert sorted(source.requests) == [(i * BLOCK, (i + 1) * BLOCK) for i in range(4)]
        first.release()  # only now does the size come
        assert reader.read() == DATA
    assert source.open_answers == 0


def test_nothing_is_asked_past_the_end_on_a_new_host_or_one_of_small_objects() -> None:
    source = ScriptedSource(DATA[:5000])
    options = dataclasses.replace(FAST, read_ahead=4)
    for _ in range(2):  # a host not seen yet, then one whose objects are half a block
        source.requests.clear()
        with RangedReader(source, options, block_bytes=BLOCK) as reader:
            assert reader.read() == DATA[:5000]
        assert source.requests == [(0, BLOCK)]


def test_an_early_block_of_a_missing_object_ends_with_its_error_and_no_answer_open() -> None:
    from conveyor.storage.http_source import HttpStatusError

    source = ScriptedSource(DATA)
    options = dataclasses.replace(FAST, read_ahead=3, read_ahead_max=3)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        reader.read()
    source.faults = [HttpStatusError(404, "Not Found", ScriptedSource.url), None, None]
    reader = RangedReader(source, options, block_bytes=BLOCK)
    try:
        reader.read(1)
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("a missing object read without an error")
    finally:
        reader.close()
    closed = source.wait_until(lambda: not (source.in_flight or source.open_answers))
    assert closed, "an early block kept its answer open"


def test_a_new_host_opens_the_held_blocks_connections_while_the_first_answer_comes() -> None:
    """Blocks held for the size go out on connections already open (no handshake's round
    trip once the first answer came), and nothing is asked before the size."""
    first = Held()
    source = ScriptedSource(DATA, faults=[first])  # a host not seen yet, the answer held
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=4)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        reader.start()
        # the first request and the warm-up run side by side on the reader's loop
        opened = source.wait_until(lambda: source.warmed and source.requests)
        assert opened, "no connection opened before the size"
        assert [warmed for warmed, _ in source.warmed] == [3]  # the window's other 3 blocks
        assert source.requests == [(0, BLOCK)]
        first.release()
        assert reader.read() == DATA
    assert len(source.warmed) == 1  # once per object
    source.warmed.clear()
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == DATA  # the host is known: the window goes out at once
    assert source.warmed == []


def test_a_throttled_first_request_is_not_queued_behind_the_blocks_sent_with_it() -> None:
    """The blocks asked for with the first wait, holding their places under the host's
    limit, for its answer; when it is throttled and the limit is no more than those
    blocks, its retry must not wait for a place behind them (it did: the reader hung)."""
    from concurrent.futures import ThreadPoolExecutor

    from scripted_source import throttle

    source = ScriptedSource(DATA)
    source.most_in_flight = 3  # type: ignore[attr-defined]  # the host's limit
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=4)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == DATA  # the host's objects: larger than the first window
    source.requests.clear()
    source.faults = [throttle(429, 0.05)]  # the next object's first request
    reader = RangedReader(source, options, block_bytes=BLOCK)
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(reader.read)
        try:
            assert reading.result(timeout=10) == DATA
        finally:
            reader.close()  # after a hang: its blocks cancelled, the read ends
    assert source.requests.count((0, BLOCK)) == 2  # throttled once, then answered


@pytest.mark.parametrize("known_host", [False, True], ids=["new host", "host of large objects"])
@pytest.mark.parametrize("blocks", [1, 2, 6])
def test_a_seek_before_the_first_answer_reads_the_right_bytes(
    known_host: bool, blocks: int
) -> None:
    """A reader started early (the next-shard hint) and then sent elsewhere before the
    object's size came: the first request is not cancelled with the blocks left behind
    (the others wait for its answer: a read hung, at block 1), and a block dropped while
    waiting for the size does not cancel that wait for the others (at block 2 the read
    failed "was cancelled")."""
    from concurrent.futures import ThreadPoolExecutor

    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=4)
    if known_host:
        with RangedReader(ScriptedSource(DATA), options, block_bytes=BLOCK) as reader:
            assert reader.read() == DATA
    first = Held()
    source = ScriptedSource(DATA, faults=[first])
    reader = RangedReader(source, options, block_bytes=BLOCK)
    try:
        reader.start()
        assert source.wait_until(lambda: source.requests), "the first request never went out"
        reader.seek(blocks * BLOCK)
        with ThreadPoolExecutor(1) as pool:
            reading = pool.submit(reader.read, BLOCK)
            first.release()
            assert reading.result(timeout=10) == DATA[blocks * BLOCK : (blocks + 1) * BLOCK]
        assert reader.first_answer.result(timeout=10) == len(DATA)
        assert reader.read() == DATA[(blocks + 1) * BLOCK :]
    finally:
        reader.close()
    assert source.wait_until(lambda: not (source.in_flight or source.open_answers))


def test_closing_after_a_seek_ends_the_first_request_let_go_of() -> None:
    """The first request, let go of by a seek before its answer, is still the reader's:
    closing the reader ends it (its answer never came here)."""
    first = Held()
    source = ScriptedSource(DATA, faults=[first])
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=4)
    reader = RangedReader(source, options, block_bytes=BLOCK)
    try:
        reader.start()
        assert source.wait_until(lambda: source.requests), "the first request never went out"
        reader.seek(6 * BLOCK)
        assert reader.read(BLOCK) == DATA[6 * BLOCK : 7 * BLOCK]  # asked for on its own
    finally:
        reader.close()
    assert source.wait_until(lambda: not (source.in_flight or source.open_answers))
