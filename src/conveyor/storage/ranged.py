"""`RangedReader`: a remote object read as a seekable stream of ranged requests.

Each request asks for the next ``block_bytes`` from the offset reached (``Range: bytes=a-b``)
and its body is streamed into a small buffer. A request that fails (timeout, reset, 5xx,
body cut short) is dropped and, after a backoff, asked again *from the byte offset reached*,
so the caller (a tar reader) sees every byte exactly once, in order. Nothing is requested
before the first read, so opening and seeking (a resumed shard) cost no round trip; a
missing object fails at the first read (``FileNotFoundError``), and ``size`` is known from
the first answer on.

Structure, for later read-ahead: `_fill` is the only place that pulls bytes; a prefetching
variant can keep the next ranges in flight behind it without changing ``read``/``seek``.
The protocol `RangeSource` is what a backend (HTTP, S3) provides.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from typing import Any, Protocol

from conveyor.storage.options import RemoteOptions
from conveyor.storage.pinning import ObjectFacts
from conveyor.storage.redaction import redact_url
from conveyor.storage.retry import Failure, ObjectChangedError, RetryRun, classify_failure

__all__ = ["FILL_BYTES", "Answer", "RangeSource", "RangedReader"]

FILL_BYTES = 1 << 20
"""Bytes pulled from the network per step at least (fewer at the end of a range): small
reads (tar headers) then cost a buffer slice, not a trip through the event loop."""

SKIP_BYTES = 1 << 20
"""A forward seek of at most this many bytes reads through instead of a new request."""


@dataclass
class Answer:
    """An open answer to one ranged request: bytes ``start`` up to ``end`` (exclusive, None
    when unknown) of an object of ``total`` bytes (None when unknown), with the version
    the server named (``etag``, ``modified``: its ``Last-Modified``), if it did."""

    handle: Any
    start: int
    end: int | None
    total: int | None
    etag: str | None = None
    modified: str | None = None


class RangeSource(Protocol):
    """One remote object's bytes, by ranges (a backend of `RangedReader`)."""

    url: str

    def request(self, start: int, end: int, etag: str | None) -> Answer:
        """Ask for bytes ``[start, end)`` (``If-Match: etag`` when given); raises on failure
        (a 412 answer to ``If-Match`` is classified as a changed object).

        An answer may start before ``start`` only when the server ignores ranges (then
        ``start`` of the answer is 0); a range past the end gives an empty answer."""
        ...

    def read(self, answer: Answer, at_least: int) -> tuple[bytes, BaseException | None]:
        """At least ``at_least`` more bytes of the answer unless it ends or fails first,
        and the error that stopped it (bytes read before an error are returned with it)."""
        ...

    def release(self, answer: Answer) -> None:
        """Close the answer (its connection is dropped if the body was not read to its end)."""
        ...

    def classify(self, error: BaseException) -> Failure:
        """What a failure of ``request`` or ``read`` was: retryable or final."""
        ...


class RangedReader(io.BufferedIOBase):
    """A binary, seekable, read-only stream over ``source``, retried per `RemoteOptions`.

    ``size`` is the object's size (None until the first answer). Not thread-safe; inert in
    a forked child (``close`` there forgets the parent's connection instead of using it).
    """

    def __init__(
        self,
        source: RangeSource,
        options: RemoteOptions,
        block_bytes: int,
        fill_bytes: int = FILL_BYTES,
    ) -> None:
        super().__init__()
        if block_bytes <= 0:
            raise ValueError(f"block_bytes must be positive, got {block_bytes}")
        self.url = source.url
        self.size: int | None = None
        self._source = source
        self._block_bytes = block_bytes
        self._fill_bytes = max(1, min(fill_bytes, block_bytes))
        self._retry = RetryRun(options, source.url)
        self._owner = os.getpid()
        self._buffer = bytearray()
        self._taken = 0  # bytes of _buffer already given to the caller
        self._position = 0  # next byte the caller reads
        self._answer: Answer | None = None
        self._facts = ObjectFacts()  # the first answer's version pins every later range

    # -- the state: position <= fetched; buffer[taken:] holds bytes [position, fetched)

    @property
    def requests_failed(self) -> int:
        """Failed requests so far (each one was retried or raised)."""
        return self._retry.total_failures

    def _unread(self) -> int:
        return len(self._buffer) - self._taken

    def _fetched(self) -> int:
        return self._position + self._unread()

    def _at_end(self, offset: int) -> bool:
        return self.size is not None and offset >= self.size

    def _request(self, start: int) -> None:
        """Open an answer for the block at ``start`` (retrying), or none past the end."""
        while not self._at_end(start):
            end = start + self._block_bytes
            if self.size is not None:
                end = min(end, self.size)
            try:
                answer = self._source.request(start, end, self._facts.if_match())
                self._admit(answer)
            except Exception as error:
                self._retry.failed(classify_failure(error, self._source.classify), start)
                continue
            if answer.total is not None:
                self.size = answer.total
            if answer.start < start:  # a server without ranges: read through to `start`
                self._answer = answer
                self._discard_answer_bytes(start - answer.start)
            self._answer = answer
            return

    def _admit(self, answer: Answer) -> None:
        """``answer`` if it comes from the version read so far; else it is closed unread and
        `ObjectChangedError` raised (final: no byte of another version is ever used)."""
        try:
            self._facts.admit(answer)
        except ObjectChangedError:
            if answer.handle is not None:
                with contextlib.suppress(Exception):
                    self._source.release(answer)
            raise

    def _discard_answer_bytes(self, count: int) -> None:
        assert self._answer is not None
        while count > 0:
            data, error = self._source.read(self._answer, min(count, self._fill_bytes))
            if error is not None or not data:
                shown = redact_url(self.url)
                raise error or OSError(f"{shown}: answer ended before the range asked for")
            count -= len(data)

    def _drop_answer(self) -> None:
        answer, self._answer = self._answer, None
        if answer is None or os.getpid() != self._owner:
            return  # in a forked child the connection belongs to the parent's event loop
        with contextlib.suppress(Exception):  # a broken answer's connection is gone anyway
            self._source.release(answer)

    def _fill(self, want: int) -> None:
        """Buffer at least ``want`` unread bytes, or all that is left of the object."""
        while self._unread() < want:
            fetched = self._fetched()
            if self._answer is None:
                if self._at_end(fetched):
                    return
                self._request(fetched)
                if self._answer is None:
                    return
            answer = self._answer
            left_in_answer = None if answer.end is None else answer.end - fetched
            at_least = max(want - self._unread(), self._fill_bytes)
            if left_in_answer is not None:
                at_least = min(at_least, left_in_answer)
            data, error = self._source.read(answer, at_least) if at_least > 0 else (b"", None)
            self._append(data)
            if error is None and data and (left_in_answer is None or len(data) < left_in_answer):
                continue  # more of this answer to come
            self._drop_answer()
            fetched = self._fetched()
            if error is None and not data and answer.end is None:
                self.size = fetched  # an answer of unknown length ended: that is the end
                return
            if error is None and (answer.end is None or fetched >= answer.end):
                self._retry.reset()  # the range is complete
                continue
            if error is None:
                error = ConnectionError(f"answer ended at byte {fetched} of {answer.end}")
            self._retry.failed(self._source.classify(error), fetched)

    def _append(self, data: bytes) -> None:
        if not data:
            return
        if self._taken and self._taken >= len(self._buffer) // 2:
            del self._buffer[: self._taken]
            self._taken = 0
        self._buffer += data

    def _take(self, count: int) -> bytes:
        count = min(count, self._unread())
        start = self._taken
        data = bytes(self._buffer[start : start + count])
        self._taken += count
        self._position += count
        if self._taken == len(self._buffer):
            self._buffer.clear()
            self._taken = 0
        return data

    # -- io.BufferedIOBase

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        self._check_open()
        if size is None or size < 0:
            parts: list[bytes] = []
            while True:
                self._fill(self._block_bytes)
                if not self._unread():
                    return b"".join(parts)
                parts.append(self._take(self._unread()))
        self._fill(size)
        return self._take(size)

    def read1(self, size: int = -1) -> bytes:
        self._check_open()
        if not self._unread():
            self._fill(1)
        return self._take(self._unread() if size < 0 else size)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        if whence == io.SEEK_CUR:
            offset += self._position
        elif whence == io.SEEK_END:
            if self.size is None:
                self._fill(1)  # the first answer says the size
            if self.size is None:
                raise OSError(f"{redact_url(self.url)}: size unknown, cannot seek from the end")
            offset += self.size
        elif whence != io.SEEK_SET:
            raise ValueError(f"invalid whence {whence}")
        if offset < 0:
            raise ValueError(f"negative seek position {offset}")
        self._move_to(offset)
        return self._position

    def _move_to(self, target: int) -> None:
        ahead = target - self._position
        if ahead == 0:
            return
        answer = self._answer
        reachable = answer is not None and (answer.end is None or target <= answer.end)
        if 0 < ahead <= self._unread() or (
            ahead > 0 and reachable and target - self._fetched() <= SKIP_BYTES
        ):
            while self._position < target:  # read through: cheaper than a new request
                self._fill(min(target - self._position, self._fill_bytes))
                if not self._take(target - self._position):
                    break  # past the end: position stops at the end, as files do
            self._position = max(self._position, target)
            return
        self._drop_answer()
        self._buffer.clear()
        self._taken = 0
        self._position = target

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(f"I/O operation on closed reader of {redact_url(self.url)}")

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._drop_answer()
            self._buffer = bytearray()
        finally:
            super().close()
