"""The read-ahead window: sized from the reader's rate x a block's turnaround, bounded, and
asked for at once at the start of an object on a host known to hold large ones."""

from __future__ import annotations

import dataclasses
import os

import pytest
from scripted_source import FAST, Late, ScriptedSource

from conveyor.storage import RangedReader, RemoteOptions, read_window
from conveyor.storage.read_window import LONG_FIRST_ANSWER_S, HostWindow, host_window

DATA = os.urandom(100_000)
BLOCK = 10_000


def test_the_window_holds_the_bytes_read_during_a_blocks_turnaround() -> None:
    options = RemoteOptions(read_ahead=2, read_ahead_max=16)
    window = HostWindow()
    assert window.blocks(options, 8 << 20) == 2  # nothing measured: read_ahead
    window.saw_block(0.3)  # 300 ms from a request to its block's last byte
    window.saw_demand(100e6)  # the reader takes 100 MB/s when it does not wait
    assert window.blocks(options, 8 << 20) == 5  # 30 MB in flight = 3.6 blocks, + 1
    window.saw_demand(1e12)
    assert window.blocks(options, 8 << 20) == 16  # never past read_ahead_max (memory)
    assert HostWindow(depth=9).blocks(options, 8 << 20) == 9  # a width it had to widen to


def test_a_reader_learns_the_turnaround_and_the_rate_and_the_next_one_starts_there() -> None:
    source = ScriptedSource(DATA, [None] + [Late(0.05)] * 9)
    options = dataclasses.replace(FAST, read_ahead=1, read_ahead_max=6)
    with RangedReader(source, options, block_bytes=BLOCK) as reader:
        while reader.read(4096):
            pass
    window = host_window(source.host)
    assert window.turnaround_s is not None and window.turnaround_s >= 0.04
    assert window.demand_bps is not None and window.demand_bps > BLOCK / 0.04
    with RangedReader(source, options, block_bytes=BLOCK) as later:
        assert later.depth == 6  # the reader outran the link: the widest window at once


def test_a_late_first_answer_on_a_host_not_measured_yet_widens_the_first_window() -> None:
    """At 100 ms a new connection's first answer takes 200 ms or more; the window the size
    lets out is then twice ``read_ahead``, not ``read_ahead`` widened block after block
    (S7 bytes at 100 ms: 0.74x of the 0 ms rate before, docs/benchmarks.md)."""
    options = RemoteOptions(read_ahead=4, read_ahead_max=16)
    window = HostWindow()
    assert window.first_answer(LONG_FIRST_ANSWER_S / 3, 4, options) == 4  # a short link
    assert window.first_answer(LONG_FIRST_ANSWER_S * 1.5, 4, options) == 8
    assert window.depth == 8  # remembered: the host's next objects start there
    assert HostWindow(depth=16).first_answer(1.0, 16, options) == 16  # within the bound
    measured = HostWindow(turnaround_s=0.5)  # Little's law sizes it from then on
    assert measured.first_answer(1.0, 4, options) == 4


def _first_window(first_answer: Late | None) -> list[int]:
    data = DATA[: 40 * 1000]
    source = ScriptedSource(data, [first_answer])
    options = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=16)
    with RangedReader(source, options, block_bytes=1000) as reader:
        assert reader.read(100) == data[:100]  # the size is known: the first window is out
        return sorted(reader._blocks)


def test_a_reader_asks_a_wider_first_window_after_a_late_first_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a threshold no prompt answer reaches on a loaded machine (the rule reads it per call)
    monkeypatch.setattr(read_window, "LONG_FIRST_ANSWER_S", 1.0)
    assert _first_window(Late(1.5)) == list(range(8))
    assert _first_window(None) == list(range(4))
