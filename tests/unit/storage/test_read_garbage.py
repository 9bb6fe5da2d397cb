"""A remote read leaves no reference cycles behind, even when its blocks are cancelled (a
reader closed while blocks wait for the object's size, or while a request and its hedge
are out). Cyclic garbage is what makes the collector run, and each full collection stops
every thread worker and the event loop at once: in S7's heavy tail, ~8 batches a pause."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import gc
import os
from collections.abc import Callable

import fsspec.asyn
import pytest
from scripted_source import FAST, Held, ScriptedSource

from conveyor.storage import RangedReader
from conveyor.storage.block_fetch import Block, BlockJob
from conveyor.storage.hedging import MIN_SAMPLES, hedge_stats

DATA = os.urandom(100_000)
BLOCK = 10_000
READS = 20
WINDOW = dataclasses.replace(FAST, read_ahead=4, read_ahead_max=4)


def _on_loop(coroutine: collections.abc.Coroutine[object, object, None]) -> None:
    asyncio.run_coroutine_threadsafe(coroutine, fsspec.asyn.get_loop()).result(10)


async def _blocks_ended() -> None:
    """Until no block's task is left on the loop (a cancelled one ends a few turns later)."""
    for _ in range(10_000):
        if not any(_is_block_task(task) for task in asyncio.all_tasks()):
            return
        await asyncio.sleep(0)
    raise AssertionError("a cancelled block's task did not end")


def _is_block_task(task: asyncio.Task[object]) -> bool:
    return getattr(task.get_coro(), "__qualname__", "") == "fetch_block"


def _closed_before_the_size() -> None:
    """A new host: the first answer held, the window's 3 other blocks waiting for the size;
    the reader closed (the first request cancelled mid-flight, the others before sending)."""
    source = ScriptedSource(DATA, faults=[Held()])
    reader = RangedReader(source, WINDOW, block_bytes=BLOCK)
    reader.start()
    assert source.wait_until(lambda: source.requests and source.warmed)
    reader.close()
    assert source.wait_until(lambda: not source.in_flight)


def _closed_while_hedged() -> None:
    """The first byte late: the request hedged, both out when the reader is closed."""
    source = ScriptedSource(DATA[:BLOCK], faults=[Held(), Held()])

    async def typical_first_byte() -> None:
        stats = hedge_stats(source.host)
        for _ in range(MIN_SAMPLES):
            stats.record(BLOCK, 0.001)

    _on_loop(typical_first_byte())
    reader = RangedReader(source, dataclasses.replace(FAST, hedge_budget=0.5), block_bytes=BLOCK)
    reader.start()
    assert source.wait_until(lambda: len(source.requests) == 2), "no hedge went out"
    reader.close()
    assert source.wait_until(lambda: not source.in_flight)


@pytest.mark.parametrize("read", [_closed_before_the_size, _closed_while_hedged])
def test_cancelled_blocks_leave_no_cyclic_garbage(read: Callable[[], None]) -> None:
    read()  # the first on a host sets its limit and statistics up
    _on_loop(_blocks_ended())
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds unreachable is kept to look at
    try:
        for _ in range(READS):
            read()
        _on_loop(_blocks_ended())
        gc.collect()
        garbage = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    kinds = collections.Counter(type(thing).__qualname__ for thing in garbage)
    ours = [
        thing
        for thing in garbage
        if isinstance(thing, Block | BlockJob)
        or (isinstance(thing, asyncio.Task) and _is_block_task(thing))
    ]
    assert len(ours) == 0, f"cancelled blocks left in reference cycles: {kinds.most_common(8)}"
    # on main: ~250 objects a read; a little room for other threads' garbage meanwhile
    assert len(garbage) <= 2 * READS, f"cyclic garbage of {READS} reads: {kinds.most_common(8)}"
    del garbage, ours
