"""One byte range of a remote object, fetched whole on the event loop, retried from the byte
reached: the unit of work of read-ahead (`conveyor.storage.readahead`).

`RangedReader` pulls a range while the caller reads it; read-ahead instead keeps several
ranges in flight as coroutines of the fsspec file system's event loop, so retries wait
there (``asyncio.sleep``) rather than blocking the thread. The rules are the same: a failed
or cut request is asked again from the first byte not yet received, under the object's
`RetryRun` (timeouts, backoff, budget of `RemoteOptions`), and every answer must come from
the version of the first one (`conveyor.storage.pinning`: ``If-Match`` and a comparison),
so that an object replaced mid-read fails instead of mixing versions.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from conveyor.storage.pinning import ObjectFacts
from conveyor.storage.ranged import Answer
from conveyor.storage.retry import Failure, ObjectChangedError, RetryRun, classify_failure

__all__ = ["AsyncRangeSource", "ObjectFacts", "fetch_range"]


class AsyncRangeSource(Protocol):
    """The coroutine side of a `RangeSource` backend (HTTP, S3), run on ``fs.loop``."""

    url: str
    fs: Any

    async def arequest(self, start: int, end: int, etag: str | None) -> Answer:
        """Ask for bytes ``[start, end)``; as `RangeSource.request`."""
        ...

    async def aread(self, answer: Answer, at_least: int) -> tuple[bytes, BaseException | None]:
        """As `RangeSource.read`."""
        ...

    async def arelease(self, handle: Any) -> None:
        """Close an answer's handle (its connection is dropped unless read to the end)."""
        ...

    def classify(self, error: BaseException) -> Failure:
        """As `RangeSource.classify`."""
        ...


async def fetch_range(
    source: AsyncRangeSource, start: int, end: int, facts: ObjectFacts, run: RetryRun
) -> bytes:
    """Bytes ``[start, end)`` of the object (fewer at its end; none past it).

    Failures are classified by the source and retried per ``run`` from the offset reached;
    the final one raises (`FileNotFoundError`, `RemoteReadError`). A successful range ends
    the run of failures (``run.reset``).
    """
    parts: list[bytes] = []
    reached = start
    while reached < end and (facts.size is None or reached < facts.size):
        try:
            got, error, finished = await _one_request(source, reached, end, facts)
        except Exception as failure:  # the request itself failed
            got, error, finished = b"", failure, False
        if got:
            parts.append(got)
            reached += len(got)
        if finished:
            break
        if error is None and got:
            continue  # a shorter range than asked for: ask for the rest
        if error is None:
            error = ConnectionError(f"answer ended at byte {reached} of {end}")
        await asyncio.sleep(run.delay_after(classify_failure(error, source.classify), reached))
    run.reset()
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def _one_request(
    source: AsyncRangeSource, start: int, end: int, facts: ObjectFacts
) -> tuple[bytes, BaseException | None, bool]:
    """One request from ``start``: its bytes, the error that cut it (if any), and whether
    the range is complete (all of it, or the object's end)."""
    answer = await source.arequest(start, end, facts.if_match())
    try:
        facts.admit(answer)  # another version of the object: final, nothing of it is used
    except ObjectChangedError:
        if answer.handle is not None:
            await source.arelease(answer.handle)
        raise
    if answer.handle is None:  # past the end
        return b"", None, True
    try:
        skip = start - answer.start  # a server without ranges answers from byte 0
        wanted = (end if answer.end is None else min(end, answer.end)) - answer.start
        data, error = await source.aread(answer, wanted)
    finally:
        await source.arelease(answer.handle)
    data = data[skip:] if skip > 0 else data
    reached = start + len(data)
    complete = (
        reached >= end
        or (facts.size is not None and reached >= facts.size)
        or (error is None and answer.end is None)  # an answer of unknown length ended
    )
    return data[: end - start], error, complete
