"""A throttle heard by one worker process reaches its siblings (memory shared at fork).

With process workers each process keeps its own limit and pace per host; the board of
`conveyor.storage.shared_throttles` is what tells the others that the store throttles, so
that they slow down and ask larger ranges before being throttled themselves.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os

import fsspec.asyn
from scripted_source import FAST, ScriptedSource

from conveyor.storage import RangedReader
from conveyor.storage.host_limits import host_limit
from conveyor.storage.shared_throttles import last_throttle, note_throttle

BLOCK = 4096
DATA = os.urandom(24 * BLOCK)


def _throttled_in_a_child(host: str) -> None:
    child = multiprocessing.get_context("fork").Process(target=note_throttle, args=(host,))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0


def test_a_throttle_noted_in_a_forked_process_is_heard_here() -> None:
    host = f"shared-board-{os.getpid()}-a"
    assert last_throttle(host) is None
    _throttled_in_a_child(host)
    assert last_throttle(host) is not None


def test_after_a_sibling_was_throttled_this_process_paces_and_asks_larger_ranges() -> None:
    source = ScriptedSource(DATA)  # never throttles this process
    source.host = f"shared-board-{os.getpid()}-b"
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read(BLOCK) == DATA[:BLOCK]  # this process's first requests
        _throttled_in_a_child(source.host)  # meanwhile a sibling is throttled
        assert reader.read() == DATA[BLOCK:]
    spans = [(end - start) // BLOCK for start, end in source.requests]
    assert max(spans) == 4 and len(source.requests) < 24, spans
    limit = host_limit(source.host, fsspec.asyn.get_loop())
    assert limit.pace.rate is not None and limit.throttles == 0  # heard, not its own


def test_a_sibling_throttle_before_any_request_here_asks_larger_ranges_unpaced() -> None:
    source = ScriptedSource(DATA)
    source.host = f"shared-board-{os.getpid()}-c"
    _throttled_in_a_child(source.host)
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=8)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        assert reader.read() == DATA
    assert max((end - start) // BLOCK for start, end in source.requests) == 4
    assert host_limit(source.host, fsspec.asyn.get_loop()).pace.rate is None  # nothing to learn
