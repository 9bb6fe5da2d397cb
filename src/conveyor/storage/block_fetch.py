"""One block of a remote object, fetched on the event loop and read while it arrives.

A `Block` is the unit of the reader's window (`conveyor.storage.ranged`): bytes
``[start, end)`` asked for by one ranged request, whose body is published in pieces as it
streams in, so the reader parses the first bytes of a block while its last ones are still
on the wire. `fetch_block` is its coroutine on fsspec's event loop:

- it takes a place under the host's concurrency limit (`host_limits`), and gives it back
  smaller when the host throttles;
- its request is hedged when the first byte is late (`hedging`);
- every answer must come from the version of the object's first one (`pinning`);
- a failure (timeout, reset, 5xx, a body cut short, a throttle) is retried from the byte
  reached after the backoff or the ``Retry-After`` asked (`retry`), and the retry budget
  bounds the whole wait: the attempt in progress at its end is cut short.
"""

from __future__ import annotations

import asyncio
import time
import traceback
import weakref
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from conveyor.storage.answers import Answer, RangeSource
from conveyor.storage.hedging import first_answer
from conveyor.storage.host_limits import HOST_CONCURRENCY, HostLimit, host_limit
from conveyor.storage.options import RemoteOptions
from conveyor.storage.pinning import ObjectFacts
from conveyor.storage.request_tally import count
from conveyor.storage.retry import RemoteReadError, RetryRun, classify_failure

__all__ = ["PIECE_BYTES", "Block", "BlockJob", "fetch_block"]

PIECE_BYTES = 1 << 20
"""The most bytes taken from an answer at once (what has arrived, up to this)."""


class Block:
    """Bytes ``[start, end)`` of one object, arriving in pieces as the answer's body comes
    in (fewer bytes at the object's end).

    Written by the event loop (`publish`, `finish`, `fail`), read by one consumer thread
    (`wait_for`, ``pieces``). Each change resolves the future the consumer may be waiting
    on and puts a new one in its place; the consumer takes the future *before* looking at
    the fields, so no change is missed.
    """

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        self.pieces: list[bytes] = []
        self.received = 0
        self.finished = False
        self.error: BaseException | None = None
        self.task: Future[None] | None = None
        self.sent_at: float | None = None  # when its request went out (monotonic clock)
        self.first_byte_at: float | None = None
        self.finished_at: float | None = None
        # while it has no request in flight and nothing received: the earliest it may be
        # asked (monotonic; 0.0: now, it waits for its turn under the host's limit and pace;
        # later: a throttle's Retry-After), else None. A reader on a throttling host may
        # ask for such a block with its neighbours instead (`ranged`).
        self.idle_until: float | None = None
        self.asked_again = False  # made by such a regrouping: never regrouped again (its
        # throttles spend the retry budget it has, which a new request would not)
        self._news: Future[None] = Future()
        self._piece = 0  # the consumer's place: piece index, and that piece's offset
        self._piece_at = 0

    @property
    def complete(self) -> bool:
        return self.finished or self.error is not None

    @property
    def turnaround_s(self) -> float | None:
        """From its request to its last byte (None unless it finished)."""
        if self.sent_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.sent_at

    def publish(self, data: bytes) -> None:
        if self.first_byte_at is None:
            self.first_byte_at = time.monotonic()
        self.pieces.append(data)
        self.received += len(data)
        self._notify()

    def finish(self) -> None:
        self.finished_at = time.monotonic()
        self.finished = True
        self._notify()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._notify()

    def _notify(self) -> None:
        news, self._news = self._news, Future()
        news.set_result(None)

    def wait_for(self, count: int, timeout: float | None = None) -> bool:
        """Until more than ``count`` bytes are in, or the block is complete; False if it
        had to wait (the reader was faster than the link)."""
        waited = False
        while True:
            news = self._news
            if self.received > count or self.complete:
                return not waited
            waited = True
            news.result(timeout)

    def slice(self, offset: int, limit: int) -> bytes:
        """Up to ``limit`` received bytes from ``offset`` (within one piece; b"" if none).
        Sequential reads find their piece at once (the consumer's place is kept)."""
        if offset < self._piece_at:
            self._piece = self._piece_at = 0
        pieces = self.pieces
        while self._piece < len(pieces):
            piece = pieces[self._piece]
            start = offset - self._piece_at
            if start < len(piece):
                end = len(piece) if limit < 0 else min(len(piece), start + limit)
                return piece if start == 0 and end == len(piece) else piece[start:end]
            self._piece_at += len(piece)
            self._piece += 1
        return b""

    def cancel(self) -> None:
        """Stop fetching (on the loop, soon): its request is cancelled, its answer closed."""
        task = self.task
        if task is not None:
            task.cancel()


@dataclass
class BlockJob:
    """Everything one block's coroutine needs; ``facts`` and ``sized`` are the object's
    (shared by its blocks: the first answer pins the version and says the size)."""

    block: Block
    source: RangeSource
    options: RemoteOptions
    facts: ObjectFacts
    sized: Future[int | None]
    lead: bool = False  # the first block asked for: it does not wait for the size
    gate: Future[int | None] | None = None  # wait for this first (the shard read before)
    early: bool = False  # asked for with the first, before the size: read once it is known
    not_before: float | None = None  # (monotonic) the blocks it replaces were told to wait


async def fetch_block(job: BlockJob) -> None:
    """Fetch ``job.block`` into its pieces; its error, if any, goes to the block."""
    block = job.block
    try:
        if job.gate is not None:  # its outcome is not ours: only wait for it
            await _outcome_of(job.gate)
        if not (job.lead or job.early):  # nothing asked past a known end, or of a failed object
            await _outcome_of(job.sized)
            if job.sized.cancelled():
                raise asyncio.CancelledError
            job.sized.result()  # the first request's error, if it failed
        if job.not_before is not None:  # the store's Retry-After, heeded
            await asyncio.sleep(max(0.0, job.not_before - time.monotonic()))
        await _connected(job.source)
        block.sent_at = time.monotonic()
        await _fetch(job)
    except BaseException as error:
        if job.lead and not job.sized.done() and isinstance(error, Exception):
            job.sized.set_exception(error)
        block.fail(error)
        # The error, kept by the block and by the task, holds this frame and those below
        # through its traceback, and they hold the block: a reference cycle, left to the
        # cyclic collector, whose full collections stall every thread (S7: ~1.4 blocks a GET are
        # cancelled waiting for the size). Without the block and job in them, it is freed at
        # once. The frames below have ended; a cancellation's keep no locals worth showing.
        if isinstance(error, asyncio.CancelledError):
            traceback.clear_frames(error.__traceback__)  # this running frame is skipped
        del block, job
        raise
    block.finish()


async def _outcome_of(future: Future[Any]) -> None:
    """Until ``future`` (the object's, shared by its blocks) is done. Waited for, not
    awaited: cancelling an awaited wrap_future cancels the future it wraps, for every
    block. Its outcome is read on the loop however this ends: an exception asyncio finds
    unread is logged with a traceback, and 3.11's traceback parses source lines with `ast`
    on the loop's thread, which races the main thread's parsing (a SystemError there)."""
    waiting = asyncio.wrap_future(future)
    waiting.add_done_callback(_read_outcome)
    await asyncio.wait([waiting])


def _read_outcome(waiting: asyncio.Future[Any]) -> None:
    if not waiting.cancelled():
        waiting.exception()


async def _fetch(job: BlockJob) -> None:
    block, source = job.block, job.source
    run = RetryRun(job.options, source.url)
    limit = host_limit(source.host, most=getattr(source, "most_in_flight", HOST_CONCURRENCY))
    reached = block.start
    while not _past_end(job, reached):
        outcome = _Attempt(reached)
        try:
            await _attempt(job, run, limit, outcome)
        except RemoteReadError:  # final: a changed object, the budget spent mid-attempt
            raise
        except _FirstAnswerFailed as failed:  # not this block's to retry
            raise failed.error from None
        except Exception as error:
            outcome.error = error
        reached = outcome.reached
        if outcome.error is None:
            if outcome.complete:
                break
            continue  # a shorter answer than asked for: ask for the rest
        failure = classify_failure(outcome.error, source.classify)
        if failure.throttled:
            limit.throttled(outcome.sent_at)
        delay = run.delay_after(failure, reached, outcome.progress_at)
        if failure.throttled and reached == block.start:
            block.idle_until = time.monotonic() + delay
        try:
            await asyncio.sleep(delay)
        finally:
            block.idle_until = None
    run.reset()


@dataclass
class _Attempt:
    reached: int
    sent_at: float = 0.0
    progress_at: float = 0.0
    complete: bool = False
    error: BaseException | None = None


async def _attempt(job: BlockJob, run: RetryRun, limit: HostLimit, outcome: _Attempt) -> None:
    """One request from ``outcome.reached`` (cut at the retry budget's end); its bytes are
    published as they come and its progress recorded in ``outcome``."""
    facts, block = job.facts, job.block
    end = block.end if facts.size is None else min(block.end, facts.size)
    asked = time.monotonic()
    if outcome.reached == block.start:
        block.idle_until = 0.0  # waiting for its turn, nothing received
    try:
        async with limit.slot(first=job.lead) as sent_at:
            block.idle_until = None
            run.postpone(sent_at - asked)  # a wait for our turn is not the store failing
            outcome.sent_at = outcome.progress_at = sent_at
            remaining = run.remaining_s()
            deadline = asyncio.timeout(remaining) if remaining is not None else None
            try:
                if deadline is not None:
                    async with deadline:
                        await _request_and_read(job, limit, outcome, end)
                else:
                    await _request_and_read(job, limit, outcome, end)
            except TimeoutError:
                if deadline is not None and deadline.expired():
                    raise run.out_of_time(outcome.reached) from None
                raise
    finally:
        block.idle_until = None


async def _request_and_read(job: BlockJob, limit: HostLimit, outcome: _Attempt, end: int) -> None:
    source, facts = job.source, job.facts
    count("requests")
    answer, _ = await first_answer(
        source, (outcome.reached, end), facts.if_match(), limit, job.options.hedge_budget
    )
    try:
        limit.answered()
        if job.early:  # the first answer says the size and the version
            await _first_answer_of(job)
        _admit(job, answer)
        if answer.handle is None:  # past the end
            outcome.complete = True
            return
        await _stream(job, answer, outcome, end)
    finally:
        await source.arelease(answer.handle)


class _FirstAnswerFailed(Exception):
    """The object's first request failed: a block asked for with it ends with its error."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


async def _first_answer_of(job: BlockJob) -> None:
    await _outcome_of(job.sized)
    if job.sized.cancelled():
        raise asyncio.CancelledError
    error = job.sized.exception()
    if error is not None:
        raise _FirstAnswerFailed(error)


def _admit(job: BlockJob, answer: Answer) -> None:
    """Pin or check the version; the first answer says the object's size."""
    job.facts.admit(answer)  # another version: ObjectChangedError, nothing of it is used
    if not job.sized.done():
        job.sized.set_result(job.facts.size)


async def _stream(job: BlockJob, answer: Answer, outcome: _Attempt, end: int) -> None:
    block, source = job.block, job.source
    skip = outcome.reached - answer.start  # a server without ranges answers from byte 0
    stop = end if answer.end is None else min(end, answer.end)
    while outcome.reached < stop:
        data, error = await source.aread(answer, min(PIECE_BYTES, stop - outcome.reached) + skip)
        ended = not data and error is None
        if skip > 0:
            dropped = min(skip, len(data))
            data, skip = data[dropped:], skip - dropped
        data = data[: stop - outcome.reached]
        if data:
            block.publish(data)
            outcome.reached += len(data)
            outcome.progress_at = time.monotonic()
        if error is not None:
            outcome.error = error
            return
        if ended:
            break
    facts = job.facts
    at_end = facts.size is not None and outcome.reached >= facts.size
    unknown_length_ended = answer.end is None and outcome.reached < stop
    outcome.complete = outcome.reached >= end or at_end or unknown_length_ended
    if not outcome.complete and outcome.reached < stop:
        outcome.error = ConnectionError(f"answer ended at byte {outcome.reached} of {stop}")


def _past_end(job: BlockJob, reached: int) -> bool:
    size = job.facts.size
    return reached >= job.block.end or (size is not None and reached >= size)


_connecting: weakref.WeakKeyDictionary[Any, asyncio.Future[Any]] = weakref.WeakKeyDictionary()


async def _connected(source: RangeSource) -> None:
    """Connect once per file system: s3fs builds its client on the first call without a
    lock, so the first concurrent requests would each build one (a quarter second of CPU
    each)."""
    connect = getattr(source.fs, "set_session", None)
    if connect is None:
        return
    pending = _connecting.get(source.fs)
    if pending is None or (pending.done() and pending.exception() is not None):
        pending = _connecting[source.fs] = asyncio.ensure_future(connect())
    await asyncio.shield(pending)
