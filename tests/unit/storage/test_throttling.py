"""Throttled stores: Retry-After read in both forms, waited out within the budget, not
counted against ``retries``; the per-host AIMD limit; hedged requests and their budget."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import os
import time

import fsspec.asyn
import pytest
from scripted_source import FAST, Late, ScriptedSource, throttle

from conveyor.storage import RangedReader, RemoteOptions, RemoteReadError, request_counts
from conveyor.storage.hedging import MIN_SAMPLES, hedge_stats
from conveyor.storage.host_limits import PROBE_ANSWERS, HostLimit, host_limit
from conveyor.storage.http_source import status_failure
from conveyor.storage.retry import Failure, RetryRun, retry_after_s

DATA = os.urandom(60_000)


def test_retry_after_is_read_as_seconds_or_as_an_http_date() -> None:
    assert retry_after_s("3") == 3.0 and retry_after_s(" 0 ") == 0.0
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 7, usegmt=True)
    assert retry_after_s(date, now=now) == pytest.approx(7.0)
    assert retry_after_s(email.utils.formatdate(now - 60, usegmt=True), now=now) == 0.0
    assert retry_after_s(None) is None and retry_after_s("soon") is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00") is None  # no zone: not an HTTP date


def test_which_answers_are_throttles() -> None:
    assert status_failure(429, "HTTP 429").throttled
    assert status_failure(503, "HTTP 503", retry_after=2.0).throttled
    assert status_failure(503, "HTTP 503", slow_down=True).throttled
    plain = status_failure(503, "HTTP 503")  # a store that is down, maybe: not a throttle
    assert plain.retryable and not plain.throttled
    assert status_failure(500, "HTTP 500", retry_after=1.0).retry_after is None


def _clocked_run(options: RemoteOptions) -> tuple[RetryRun, list[float]]:
    now = [0.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    return RetryRun(options, "http://h/x", clock=lambda: now[0], sleep=sleep), waits


def test_retry_run_backoff_doubles_with_jitter_within_the_budget() -> None:
    options = RemoteOptions(retries=10, backoff_s=1.0, backoff_max_s=4.0, retry_budget_s=9.0)
    run, waits = _clocked_run(options)
    with pytest.raises(RemoteReadError, match="gave up after"):
        for _ in range(11):
            run.failed(Failure("connection refused", retryable=True), 0)
    caps = [1.0, 2.0, 4.0, 4.0]
    assert all(cap / 2 <= wait <= cap for wait, cap in zip(waits, caps, strict=False))
    assert sum(waits) <= 9.0 and len(waits) < 10  # the budget, not the count, ended it


def test_throttles_wait_what_the_server_asks_and_do_not_spend_the_retries() -> None:
    options = RemoteOptions(retries=1, retry_budget_s=30.0)
    run, waits = _clocked_run(options)
    asked = Failure("HTTP 429", True, 429, throttled=True, retry_after=2.0)
    for _ in range(5):  # five throttles in a row: more than `retries`, within the budget
        run.failed(asked, 0)
    assert all(2.0 <= wait <= 2.0 + 0.45 for wait in waits)  # the time asked, a little more
    assert len(set(waits)) > 1  # jittered: readers do not all come back at once
    with pytest.raises(RemoteReadError, match="HTTP 500"):  # a real failure still counts
        run.failed(Failure("HTTP 500", True, 500), 0)
        run.failed(Failure("HTTP 500", True, 500), 0)


def test_a_retry_after_past_the_budget_is_the_error_at_once() -> None:
    run, waits = _clocked_run(RemoteOptions(retry_budget_s=10.0))
    with pytest.raises(RemoteReadError, match="asked to wait 60 s") as caught:
        run.failed(Failure("HTTP 503 SlowDown", True, 503, throttled=True, retry_after=60.0), 4096)
    assert waits == [] and caught.value.offset == 4096 and caught.value.attempts == 1


def _on_loop(coroutine: object) -> object:
    return fsspec.asyn.sync(fsspec.asyn.get_loop(), lambda: coroutine)


def test_the_host_limit_halves_then_grows_back_below_the_throttled_level_then_probes() -> None:
    limit = HostLimit("h", most=16)

    async def scenario() -> list[float]:
        seen = []
        async with limit.slot() as first_sent, limit.slot(), limit.slot():
            async with limit.slot():
                pass  # this one was throttled: its place is given back first
            limit.throttled(first_sent)  # 4 were in flight: limit 2, at most 3 again
            seen.append(limit.limit)
            limit.throttled(first_sent)  # sent before that cut: no second cut
            seen.append(limit.limit)
            limit.answered()  # 3 in flight, over the limit of 2: it binds, so it grows
            seen.append(limit.limit)
            for _ in range(5):
                limit.answered()
            seen.append(limit.limit)  # up to 3 (one below the throttled 4), no further
            for _ in range(PROBE_ANSWERS):
                limit.answered()
            seen.append(limit.limit)  # then one probe: 4
        limit.answered()  # nothing in flight: the limit is not binding, it does not grow
        seen.append(limit.limit)
        return seen

    assert _on_loop(scenario()) == [2.0, 2.0, 2.5, 3.0, 4.0, 4.0]
    assert limit.throttles == 2 and limit.cuts == 1


def test_requests_over_the_limit_wait_for_a_slot_in_order() -> None:
    limit = HostLimit("h", most=2)
    order: list[int] = []

    async def one(index: int, hold: asyncio.Event) -> None:
        async with limit.slot():
            order.append(index)
            await hold.wait()

    async def scenario() -> int:
        hold = asyncio.Event()
        tasks = [asyncio.ensure_future(one(i, hold)) for i in range(5)]
        await asyncio.sleep(0.05)
        peak = limit.in_flight
        hold.set()
        await asyncio.gather(*tasks)
        return peak

    assert _on_loop(scenario()) == 2
    assert order == [0, 1, 2, 3, 4] and limit.in_flight == 0


def test_a_throttling_source_is_read_whole_and_its_host_limit_shrinks() -> None:
    faults = [None, throttle(429, 0.05), throttle(429, 0.05), None, throttle(503, 0.05)]
    source = ScriptedSource(DATA, faults)
    options = dataclasses.replace(FAST, retries=0, read_ahead=4)  # throttles do not count
    before = request_counts()
    started = time.monotonic()
    with RangedReader(source, options, block_bytes=10_000) as reader:
        assert reader.read() == DATA
    assert time.monotonic() - started >= 0.05  # waited what was asked
    counted = request_counts() - before
    # 6 blocks, 3 throttles: after them blocks share requests (those throttled waiting
    # to be asked again may be asked together with their neighbours)
    assert counted.throttled == 3 and counted.requests == len(source.requests) in (7, 8, 9)
    limit = host_limit(source.host, fsspec.asyn.get_loop())
    assert limit.throttles == 3 and limit.limit < limit.most


def _warm(source_host: str, seconds: float, count: int = MIN_SAMPLES) -> None:
    async def fill() -> None:
        stats = hedge_stats(source_host)
        for _ in range(count):
            stats.record(10_000, seconds)

    _on_loop(fill())


@pytest.mark.parametrize("hedge_wins", [True, False])
def test_a_late_first_byte_is_hedged_and_the_first_answer_wins(hedge_wins: bool) -> None:
    # the primary is 0.5 s late; the hedge answers at once (it wins), or is later still
    faults = [Late(0.5), None] if hedge_wins else [Late(0.3), Late(2.0)]
    source = ScriptedSource(DATA[:10_000], faults)
    _warm(source.host, 0.01)  # typical first byte: 10 ms
    options = dataclasses.replace(FAST, hedge_budget=0.5)
    before = request_counts()
    started = time.monotonic()
    with RangedReader(source, options, block_bytes=10_000) as reader:
        assert reader.read() == DATA[:10_000]
    elapsed = time.monotonic() - started
    counted = request_counts() - before
    assert counted.hedged == 1 and counted.hedge_wins == int(hedge_wins)
    assert source.requests == [(0, 10_000), (0, 10_000)]
    assert (elapsed < 0.4) if hedge_wins else (0.3 <= elapsed < 1.5)
    deadline = time.monotonic() + 5
    while source.in_flight or source.open_answers:  # the loser ended, its answer closed
        assert time.monotonic() < deadline, "a cancelled hedge kept its request or answer"
        time.sleep(0.01)


def test_hedges_stay_within_their_budget_and_none_before_enough_is_known() -> None:
    source = ScriptedSource(DATA[:10_000], [Late(0.2)] * 10)
    options = dataclasses.replace(FAST, hedge_budget=0.05)
    before = request_counts()
    with RangedReader(source, options, block_bytes=10_000) as reader:  # nothing timed yet
        assert reader.read() == DATA[:10_000]
    assert (request_counts() - before).hedged == 0
    _warm(source.host, 0.01, 2 * MIN_SAMPLES)  # the late one above is past the 97.5th pct.
    before = request_counts()
    for _ in range(8):  # late every time: the budget (1 token, 5 % a request) allows one
        with RangedReader(source, options, block_bytes=10_000) as reader:
            assert reader.read() == DATA[:10_000]
    assert (request_counts() - before).hedged == 1
