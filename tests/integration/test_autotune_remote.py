"""Autotune raises the remote read-ahead when the workers wait on remote reads.

Real HTTP server on 127.0.0.1 (``/slow/<seconds>/`` answers late: an object store's
latency), real workers. The readers are set to one block at a time and never to widen
(``read_ahead=1, read_ahead_max=1``); each sample reports the window its reader kept, so
the samples show the workers' readers taking autotune's read-ahead once it was sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from remote_servers import HttpServer

from conveyor import AutotuneOptions, DataLoader, IterableDataset
from conveyor.storage import RemoteOptions, get_filesystem
from conveyor.storage.read_window import read_ahead_floor

BLOCK = 1024
ONE_BLOCK_AT_A_TIME = RemoteOptions(read_ahead=1, read_ahead_max=1)


class RemoteReads(IterableDataset[int]):
    """Opens ``url`` ``count`` times, reads its first bytes; yields the reader's window."""

    def __init__(self, url: str, count: int) -> None:
        self.url, self.count = url, count

    def __iter__(self) -> Iterator[int]:
        fs = get_filesystem(self.url, None, ONE_BLOCK_AT_A_TIME)
        for _ in range(self.count):
            with fs.open(self.url, BLOCK) as stream:
                stream.read(1)
                yield stream.depth


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_workers_waiting_on_remote_reads_get_a_wider_read_ahead(
    http_server: HttpServer, worker_type: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"{http_server.url}/slow/0.03/shards/part-000.tar"  # 30 ms to the first byte
    loader = DataLoader(
        RemoteReads(url, 24),
        batch_size=2,
        num_workers=2,
        worker_type=worker_type,
        autotune=AutotuneOptions(max_read_ahead=8),
    )
    depths = []
    with caplog.at_level(logging.INFO, logger="conveyor.autotune"):
        for batch in loader:
            depths += batch.tolist()
            time.sleep(0.002)  # the training step: far shorter than a read
    decisions = loader.stats().decisions
    assert decisions and decisions[0].read_ahead == 8
    assert "read-ahead 8 blocks" in caplog.records[0].getMessage()
    assert len(caplog.records) == len(decisions)  # one line per change
    assert loader.stats().requests.requests > 0
    # before the change the readers kept their one block; after it, autotune's eight
    assert depths[0] == 1 and depths[-1] == 8, depths
    if worker_type == "thread":  # process workers set the floor in their own processes only
        assert read_ahead_floor(BLOCK) == 0  # the workers ended: this process's readers own it
