"""What a backend (HTTP, S3) gives the remote reader: `Answer`s to ranged requests.

A `RangeSource` opens, reads and closes answers as coroutines of the fsspec file system's
event loop (``fs.loop``), and says what a failure was (`Failure`); everything else (the
window of blocks, retries, hedging, the per-host limit, version pinning) is the reader's
(`conveyor.storage.ranged`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from conveyor.storage.retry import Failure

__all__ = ["Answer", "RangeSource"]


@dataclass
class Answer:
    """An open answer to one ranged request: bytes ``start`` up to ``end`` (exclusive, None
    when unknown) of an object of ``total`` bytes (None when unknown), with the version
    the server named (``etag``, ``modified``: its ``Last-Modified``), if it did. ``handle``
    is None for a range past the end (nothing to read or close)."""

    handle: Any
    start: int
    end: int | None
    total: int | None
    etag: str | None = None
    modified: str | None = None


class RangeSource(Protocol):
    """One remote object's bytes, by ranges, on ``fs.loop``.

    ``host`` names what the per-host concurrency limit and latency statistics are kept
    for (an HTTP host, an S3 endpoint and bucket).
    """

    url: str
    fs: Any
    host: str

    async def arequest(self, start: int, end: int, etag: str | None) -> Answer:
        """Ask for bytes ``[start, end)`` (``If-Match: etag`` when given); raises on failure
        (a 412 answer to ``If-Match`` is classified as a changed object).

        An answer may start before ``start`` only when the server ignores ranges (then
        ``start`` of the answer is 0); a range past the end gives an empty answer."""
        ...

    async def aread(self, answer: Answer, at_most: int) -> tuple[bytes, BaseException | None]:
        """The next bytes of the answer as soon as some have arrived (at most ``at_most``;
        b"" at its end), or the error that stopped it: so the reader learns of every byte
        when it comes, and a stall is timed from the last one."""
        ...

    async def awarm(self, connections: int) -> None:
        """Open up to ``connections`` connections to the host for requests about to be
        sent, sending nothing (`conveyor.storage.warm_pool`); failures are ignored."""
        ...

    async def arelease(self, handle: Any) -> None:
        """Close an answer's handle (its connection is dropped unless read to the end)."""
        ...

    def classify(self, error: BaseException) -> Failure:
        """What a failure of ``arequest`` or ``aread`` was: retryable or final."""
        ...
