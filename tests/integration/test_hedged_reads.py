"""Hedged reads against a real HTTP server: a late first byte is asked for again, the first
answer wins, the other request is cancelled and its connection closed, the bytes are the
object's (pinned by its ETag), and the hedges are counted."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_servers import Fault, FaultyServer
from test_remote_faults import FAST

from conveyor.storage import RemoteOptions, get_filesystem, open_url, request_counts

pytestmark = pytest.mark.timeout(60)

BLOCK = 4096
# a late request is not timed out (it is the hedge's to overtake), whatever the p95 is on a
# loaded machine
HEDGED = dataclasses.replace(FAST, read_timeout_s=10.0, read_ahead=2, hedge_budget=0.05)


@pytest.fixture
def server(tmp_path: Path, fsspec_loop: None) -> Iterator[FaultyServer]:
    for name in ("warm", "target"):
        (tmp_path / f"{name}.bin").write_bytes(os.urandom(16 * BLOCK))
    served = FaultyServer(tmp_path)
    served.etags = "honour"  # every request carries If-Match once the first answer pinned it
    try:
        yield served
    finally:
        served.close()


def _read(server: FaultyServer, name: str, remote: RemoteOptions = HEDGED) -> bytes:
    with open_url(f"{server.url}/{name}.bin", block_size=BLOCK, remote=remote) as stream:
        return stream.read()


def _warm_up(server: FaultyServer, tmp_path: Path) -> None:
    """Time enough first bytes of this host's 4 KiB requests for a hedge delay (>= 20)."""
    for _ in range(3):
        assert _read(server, "warm") == (tmp_path / "warm.bin").read_bytes()


def _wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _no_connection_held(server: FaultyServer) -> None:
    """Every connection to the server is back in the pool, none held by a request."""
    fs = get_filesystem(server.url, None, HEDGED).fs  # type: ignore[attr-defined]
    connector = fs._session.connector
    assert not connector._acquired, "a request kept its connection"


@pytest.mark.parametrize("hedge_wins", [True, False])
def test_a_late_first_byte_is_hedged_and_the_loser_is_cancelled(
    server: FaultyServer, tmp_path: Path, hedge_wins: bool
) -> None:
    _warm_up(server, tmp_path)
    first = Fault("late", seconds=5.0 if hedge_wins else 0.4)
    second = Fault("serve") if hedge_wins else Fault("late", seconds=5.0)
    server.script("/target.bin", first, second)
    before = request_counts()
    started = time.monotonic()
    # a budget that is never short here (the warm-up may have spent the 5 %'s tokens); one
    # block at a time, so that the scripted answers go to the first block and its hedge (on
    # a host known to hold large objects, a window's blocks go out with the first)
    generous = dataclasses.replace(HEDGED, hedge_budget=1.0, read_ahead=0)
    assert _read(server, "target", generous) == (tmp_path / "target.bin").read_bytes()
    elapsed = time.monotonic() - started
    counted = request_counts() - before
    # the late first block was hedged (a normal block may be too: 5 % are over the p95)
    assert counted.hedged >= 1 and (counted.hedge_wins >= 1 if hedge_wins else True)
    assert elapsed < (1.5 if hedge_wins else 3.0), elapsed  # not the late one's 5 s
    if not hedge_wins:
        assert elapsed >= 0.4
    assert server.ranges("/target.bin")[:2] == [0, 0]  # the first block, twice
    # the loser was cancelled: the server sees its connection closed, unanswered
    _wait_for(lambda: server.abandoned == 1, "the cancelled request's connection stayed open")
    _no_connection_held(server)


def test_hedges_are_bounded_by_their_budget(server: FaultyServer, tmp_path: Path) -> None:
    _warm_up(server, tmp_path)
    server.script("/target.bin", *[Fault("late", seconds=1.0)] * 16)  # every first byte late
    before = request_counts()
    assert _read(server, "target") == (tmp_path / "target.bin").read_bytes()
    counted = request_counts() - before
    # at most 4 tokens saved up, plus 5 % of the requests since
    assert counted.hedged <= 4 + 0.05 * counted.requests
    _no_connection_held(server)
