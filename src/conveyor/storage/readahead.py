"""Read-ahead for remote objects: concurrent ranged GETs in a bounded window, next shard early.

Why: `RangedReader` (and fsspec's file object) asks for the next range only when the reader
runs out of bytes, one request at a time: every block boundary costs a round trip during
which the worker has nothing to parse, and a single TCP stream moves at most its window per
round trip. Over a 100 ms link that cuts an I/O-bound reader to a third (S7 in
docs/benchmarks.md).

`ReadAheadStream` keeps up to ``depth`` blocks requested ahead of the reading position,
each its own ranged GET, running concurrently on fsspec's event loop (connections are
pooled and reused by the file system's client, one per concurrent request, kept alive
across shards). The first blocks ramp up from ``first_block`` (1, 2, 4 MiB) to
``block_size`` (8 MiB) so that a first batch does not wait for a whole block. The window
doubles each time the reader has to wait for a block already asked for (the
round trip is long for the link's bandwidth: 4 blocks in flight moved 0.66x of a 0 ms
link's bytes at 100 ms, 8 moved 0.92x; S7), up to ``max_depth``, and later objects start
at the width learned. Memory is bounded by ``max_depth * block_size`` per stream (blocks
behind the position are dropped). The object's size comes with the first block's answer
(no request of its own), and only then are the next blocks asked for.

`ReadAhead.hint(url)` starts the next shard (its size and its whole first window) while the
current one is still being read, so that the link stays busy across the boundary instead
of ramping up after it; `ReadAhead.open(url)` takes that stream if it was hinted. At most
``hints`` streams wait that way; the oldest is cancelled when more are hinted. Per worker
that is at most ``(1 + hints) * max_depth * block_size`` bytes (64 MiB by default on a
fast link, 128 MiB once the window has widened to the default ``read_ahead_max``).

This module starts no thread: requests are coroutines of the fsspec file system's own
event loop (``fs.loop``), awaited through ``concurrent.futures`` futures.

Wiring: `RemoteFileSystem.open` returns a `ReadAheadStream` for ``http(s)://`` and
``s3://`` objects unless ``RemoteOptions(read_ahead=0)``; each block is a `fetch_range`
(retried from the byte reached, ``If-Match`` on the first answer's ETag). `ShardLister`
hints a consumer's next shard when it hands out the current one.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from concurrent.futures import CancelledError, Future, InvalidStateError
from typing import Any

from conveyor.storage.options import RemoteOptions
from conveyor.storage.range_fetch import AsyncRangeSource, ObjectFacts, fetch_range
from conveyor.storage.redaction import redact_text, redact_url
from conveyor.storage.retry import RemoteReadError, RetryRun

__all__ = [
    "DEFAULT_DEPTH",
    "DEFAULT_FIRST_BLOCK",
    "DEFAULT_HINTS",
    "DEFAULT_READAHEAD_BLOCK",
    "ReadAhead",
    "ReadAheadStream",
    "SizeSlot",
    "supports",
]

DEFAULT_READAHEAD_BLOCK = 8 << 20
DEFAULT_FIRST_BLOCK = 1 << 20
"""The first block of a stream (then 2, 4, 8 MiB): a first batch need not wait for 8 MiB."""
DEFAULT_DEPTH = 4
"""Blocks in flight per stream: 4 x 8 MiB = 32 MiB per open shard."""
DEFAULT_HINTS = 1
"""Shards opened early per process (each holds up to ``depth`` blocks)."""

Fetch = Callable[[int, int], "Future[bytes]"]


def supports(fs: Any) -> bool:
    """True for fsspec file systems that can run ranged reads concurrently (s3, gcs, http)."""
    return bool(getattr(fs, "async_impl", False)) and getattr(fs, "loop", None) is not None


class ReadAheadStream(io.RawIOBase):
    """A sequential, seekable reader of ``[0, size)`` that fetches blocks ahead of itself.

    ``fetch(start, end)`` returns a future of the bytes ``[start, end)`` (fewer at the end
    of the object); ``size`` is the object's size or a future of it. Reads wait for the
    block under the position; seeking drops the blocks outside the new window.
    """

    def __init__(
        self,
        url: str,
        fetch: Fetch,
        size: int | Future[int],
        block_size: int = DEFAULT_READAHEAD_BLOCK,
        depth: int = DEFAULT_DEPTH,
        timeout: float | None = None,
        first_block: int | None = DEFAULT_FIRST_BLOCK,
        whole_window: bool = False,
        max_depth: int | None = None,
        grew: Callable[[int], None] | None = None,
    ) -> None:
        if block_size < 1 or depth < 1:
            raise ValueError("ReadAheadStream: block_size and depth must be at least 1")
        # The first blocks double from ``first_block`` up to ``block_size`` (the ramp): the
        # first bytes (a first batch) arrive sooner than a whole block would.
        self._ramp: list[int] = []
        step = first_block or block_size
        while step < block_size:
            self._ramp.append(step)
            step *= 2
        self._ramp_bytes = sum(self._ramp)
        super().__init__()
        self.url = url
        self._fetch = fetch
        self._size_future = size if isinstance(size, Future) else None
        self._size: int | None = None if isinstance(size, Future) else size
        self.block_size = block_size
        self.depth = depth
        self.max_depth = max(depth, max_depth or depth)
        self._grew = grew  # told the new depth, so the next object starts there
        self.timeout = timeout
        self._position = 0
        self._blocks: OrderedDict[int, Future[bytes]] = OrderedDict()
        self._current: tuple[int, bytes] | None = None
        # A full block has come back, so the object goes on after it: request the whole
        # window. ``whole_window`` does so from the start (a hinted object: its window is
        # in by the time it is opened, instead of ramping up then); ``fetch`` must then
        # hold the other blocks until the first answer has said the size.
        self._large = self._whole_window = whole_window
        self._schedule(0)

    # -- sizes and scheduling

    @property
    def size(self) -> int | None:
        """The object's size once an answer said it, else None (as `RangedReader.size`)."""
        return self._known_size()

    def _wait_size(self) -> int:
        """The object's size, waiting for the first block's answer if need be."""
        if self._size is None:
            assert self._size_future is not None
            self._size = int(self._wait(self._size_future, "size"))
        return self._size

    def _known_size(self) -> int | None:
        future = self._size_future
        if self._size is None and future is not None and future.done():
            if future.cancelled() or future.exception() is not None:
                return None  # no size (the error, if any, comes with the block that failed)
            return self._wait_size()
        return self._size

    def _schedule(self, first: int) -> None:
        """Request blocks ``first .. first + depth - 1`` that exist and are not requested."""
        size = self._known_size()
        if size is not None:
            last = min(first + self.depth, self._count(size)) - 1
        elif self._large:  # size unknown, but a full block came back: fill the window
            last = first + self.depth - 1  # a block past the end answers 416: read as the end
        else:  # nothing known yet: the first block only
            last = first
        for index in range(first, last + 1):
            if index not in self._blocks:
                start, end = self._span(index)
                self._blocks[index] = self._fetch(start, end)
        for index in [i for i in self._blocks if i < first or i > first + self.depth - 1]:
            self._blocks.pop(index).cancel()

    def _span(self, index: int) -> tuple[int, int]:
        """Bytes ``[start, end)`` of block ``index``: the ramp's blocks, then full ones."""
        if index < len(self._ramp):
            start = sum(self._ramp[:index])
            return start, start + self._ramp[index]
        start = self._ramp_bytes + (index - len(self._ramp)) * self.block_size
        return start, start + self.block_size

    def _index(self, offset: int) -> int:
        if offset >= self._ramp_bytes:
            return len(self._ramp) + (offset - self._ramp_bytes) // self.block_size
        index = 0
        while offset >= self._ramp[index]:
            offset -= self._ramp[index]
            index += 1
        return index

    def _count(self, size: int) -> int:
        """Blocks of an object of ``size`` bytes."""
        return self._index(size - 1) + 1 if size > 0 else 1

    def _wait(self, future: Future[Any], what: str) -> Any:
        shown = redact_url(self.url)
        try:
            return future.result(self.timeout)
        except CancelledError:
            raise OSError(f"read-ahead of {shown!r} ({what}) was cancelled") from None
        except TimeoutError:
            raise OSError(
                f"read-ahead of {shown!r} ({what}): no answer in {self.timeout} s"
            ) from None
        except (FileNotFoundError, RemoteReadError):
            raise  # final, and already naming the object and the byte offset
        except Exception as error:
            reason = redact_text(f"{type(error).__name__}: {error}")
            raise OSError(f"read-ahead of {shown!r} ({what}): {reason}") from None

    def _block(self, index: int) -> bytes:
        if self._current is not None and self._current[0] == index:
            return self._current[1]
        self._schedule(index)
        future = self._blocks.get(index)
        if future is None:
            return b""  # past the end
        self._widen_if_waiting(index, future)
        start, end = self._span(index)
        try:
            data: bytes = self._wait(future, f"bytes {start}-{end - 1}")
        except OSError:
            if start >= self._wait_size():  # asked past the end before the size was known
                return b""
            raise
        self._blocks.pop(index, None)
        if len(data) < end - start:  # a short block is the last (or past the end: empty)
            known = self._known_size()
            self._size = start + len(data) if known is None else known
        else:
            self._large = True
        self._current = (index, data)
        self._schedule(index + 1)  # keep the window full while this block is consumed
        return data

    def widen_to(self, depth: int) -> None:
        """Keep at least ``depth`` blocks in flight from now on (at most ``max_depth``)."""
        self.depth = max(self.depth, min(depth, self.max_depth))

    def _widen_if_waiting(self, index: int, future: Future[bytes]) -> None:
        """The reader is about to wait for a block asked for earlier: the link's round trip
        is long for its bandwidth, so keep twice as many blocks in flight (up to
        ``max_depth``; one step reaches the default's 8 from 4).
        The first blocks, asked for as the object opened, say nothing about the link."""
        if future.done() or self.depth >= self.max_depth or index < max(1, len(self._ramp)):
            return
        self.depth = min(2 * self.depth, self.max_depth)
        if self._grew is not None:
            self._grew(self.depth)

    # -- io.RawIOBase

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._position
        elif whence == io.SEEK_END:
            offset += self._wait_size()
        if offset < 0:
            raise ValueError(f"negative seek position {offset}")
        if self._whole_window and self._known_size() is None:
            self._wait_size()  # the held blocks wait for the first one: keep it
        self._position = offset
        self._schedule(self._index(offset))
        return offset

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        wanted = -1 if size is None or size < 0 else size
        parts: list[bytes] = []
        while wanted != 0:
            index = self._index(self._position)
            offset = self._position - self._span(index)[0]
            data = self._block(index)
            chunk = data[offset:] if wanted < 0 else data[offset : offset + wanted]
            if not chunk:
                break
            parts.append(chunk)
            self._position += len(chunk)
            if wanted > 0:
                wanted -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            for future in self._blocks.values():
                future.cancel()
            self._blocks.clear()
            self._current = None
            if self._size_future is not None:
                self._size_future.cancel()
        super().close()


class ReadAhead:
    """Opens one file system's objects as `ReadAheadStream`s; `hint` starts the next early.

    ``source_for(url)`` gives the object's `AsyncRangeSource` (HTTP, S3); every block is a
    `fetch_range` coroutine on ``fs.loop``, retried per ``options`` from the byte reached,
    and the object's size comes with the first block (no request of its own).
    """

    def __init__(
        self,
        fs: Any,
        source_for: Callable[[str], AsyncRangeSource],
        options: RemoteOptions,
        block_size: int = DEFAULT_READAHEAD_BLOCK,
        depth: int = DEFAULT_DEPTH,
        hints: int = DEFAULT_HINTS,
        timeout: float | None = None,
        first_block: int | None = DEFAULT_FIRST_BLOCK,
        max_depth: int | None = None,
    ) -> None:
        if not supports(fs):
            raise ValueError(f"ReadAhead needs an asynchronous fsspec file system, not {fs!r}")
        self.fs = fs
        self.source_for = source_for
        self.options = options
        self.block_size = block_size
        self.depth = depth  # grows as streams find the link slow (`ReadAheadStream`)
        self.max_depth = max(depth, max_depth or depth)
        self.hints = hints
        self.timeout = timeout
        self.first_block = first_block
        self._hinted: OrderedDict[str, ReadAheadStream] = OrderedDict()
        self._connecting: asyncio.Future[Any] | None = None
        # Hinted reads wait until the first object opened here has its first block: at
        # start-up the next shard must not compete with the first batch for the link and
        # the CPU (a hint comes before the first open: the lister hands out shard 0 and
        # names shard 1 in one step).
        self._first_block_in: Future[None] = Future()

    def _submit(self, coroutine: Coroutine[Any, Any, Any]) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.fs.loop)

    async def _ready(self) -> None:
        """Connect once: s3fs builds its client on the first call without a lock, so the
        first concurrent requests would each build one (a quarter second of CPU each)."""
        connect = getattr(self.fs, "set_session", None)
        if connect is None:
            return
        if self._connecting is None:  # runs on the event loop's thread: no race
            self._connecting = asyncio.ensure_future(connect())
        await asyncio.shield(self._connecting)

    async def _get(
        self,
        source: AsyncRangeSource,
        span: tuple[int, int],
        run: RetryRun,
        size: SizeSlot,
        hinted: bool,
    ) -> bytes:
        try:
            if hinted and not self._first_block_in.done():
                await asyncio.wrap_future(self._first_block_in)
            # A hinted window's later blocks wait for the size: nothing is asked past the end.
            if hinted and span[0] > 0 and span[0] >= await asyncio.wrap_future(size.future):
                return b""
            await self._ready()
            data = await fetch_range(source, span[0], span[1], size.facts, run)
        except BaseException as error:
            size.fail(error)
            raise
        size.learned()
        return data

    def _start(
        self, url: str, block_size: int | None = None, hinted: bool = False
    ) -> ReadAheadStream:
        block_size = block_size or self.block_size
        source = self.source_for(url)
        run = RetryRun(self.options, url)
        size = SizeSlot()
        if not hinted and not self._first_block_in.done():
            size.future.add_done_callback(self._open_gate)

        def fetch(start: int, end: int) -> Future[bytes]:
            return self._submit(self._get(source, (start, end), run, size, hinted))

        first_block = (
            self.first_block if self.first_block and self.first_block < block_size else None
        )
        return ReadAheadStream(
            url,
            fetch,
            size.future,
            block_size,
            self.depth,
            self.timeout,
            first_block,
            whole_window=hinted,
            max_depth=self.max_depth,
            grew=self._learn_depth,
        )

    def _learn_depth(self, depth: int) -> None:
        """A stream widened its window: later objects of this file system start as wide."""
        self.depth = max(self.depth, depth)

    def hint(self, url: str) -> None:
        """Start reading ``url`` now: it is the next one `open` will be asked for."""
        if self.hints < 1 or url in self._hinted:
            return
        self._hinted[url] = self._start(url, hinted=True)
        while len(self._hinted) > self.hints:
            _, dropped = self._hinted.popitem(last=False)
            dropped.close()

    def open(self, url: str, block_size: int | None = None) -> ReadAheadStream:
        """A read-ahead stream of ``url`` (the hinted one if there is; the caller closes it)."""
        hinted = self._hinted.pop(url, None)
        if hinted is None:
            return self._start(url, block_size)
        self._open_gate()  # a hinted object is wanted now: nothing to wait for any more
        hinted.widen_to(self.depth)  # the window learned since it was hinted
        return hinted

    def _open_gate(self, _: object = None) -> None:
        with contextlib.suppress(InvalidStateError):  # opened already (by another thread)
            self._first_block_in.set_result(None)

    def close(self) -> None:
        """Cancel the hinted streams nobody opened."""
        while self._hinted:
            self._hinted.popitem()[1].close()


class SizeSlot:
    """The object's size as a future, answered by its first completed block."""

    def __init__(self) -> None:
        self.facts = ObjectFacts()
        self.future: Future[int] = Future()

    def learned(self) -> None:
        if self.future.done():
            return
        if self.facts.size is None:
            self.future.set_exception(OSError("the server does not say the object's size"))
        else:
            self.future.set_result(self.facts.size)

    def fail(self, error: BaseException) -> None:
        if not self.future.done() and isinstance(error, Exception):
            self.future.set_exception(error)
