"""The read-ahead window: sized from the reader's rate x a block's turnaround, bounded, and
asked for at once at the start of an object on a host known to hold large ones."""

from __future__ import annotations

import dataclasses
import os

from scripted_source import FAST, Late, ScriptedSource

from conveyor.storage import RangedReader, RemoteOptions
from conveyor.storage.read_window import HostWindow, host_window

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
