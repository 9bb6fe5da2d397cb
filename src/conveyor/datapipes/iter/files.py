"""Files: ``list_files``, ``open_files`` and ``read_from_stream``, local or remote (fsspec).

Nothing is listed or opened before the first item is pulled. Remote URLs need
``pip install conveyor[remote]``.

A path that says which one its consumer opens after it (`UrlWithNext`, as `ShardLister`
yields them) lets ``open_files`` start reading that next remote object while the current
one is read: the next-shard hint travels down the graph with the item, so every consumer
(a thread worker, a process worker) keeps its own, and nothing is shared per process.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from typing import IO, Any

from conveyor.datapipes.base import Cursor, IterDataPipe, SourceCursor, StateDict
from conveyor.datapipes.iter.expanding import ExpandingCursor, Expansion, register_functional
from conveyor.datapipes.iter.wrappers import IterableWrapper
from conveyor.formats.errors import ErrorPolicy, OnError, SampleError, as_policy
from conveyor.storage import (
    DEFAULT_BLOCK_BYTES,
    RemoteOptions,
    ShardCache,
    is_local,
    list_files,
    open_early,
    open_url,
)

__all__ = ["FileLister", "FileOpener", "StreamReader", "UrlWithNext"]


class UrlWithNext(str):
    """A URL (a plain ``str`` to everyone else) that names the one its consumer reads
    after it: ``open_files`` starts reading ``next_url`` early. ``start``: the byte to read
    it from (a shard another consumer had begun, `conveyor.datapipes.iter.shards.ShardURL`)."""

    next_url: str | None
    start: int

    def __new__(cls, url: str, next_url: str | None, start: int = 0) -> UrlWithNext:
        made = super().__new__(cls, url)
        made.next_url = next_url
        made.start = start
        return made

    def __reduce__(self) -> tuple[type[UrlWithNext], tuple[str, str | None, int]]:
        return (UrlWithNext, (str(self), self.next_url, self.start))


def _as_pipe(root: str | Sequence[str] | IterDataPipe[str]) -> IterDataPipe[str]:
    if isinstance(root, IterDataPipe):
        return root
    roots = [root] if isinstance(root, str) else list(root)
    return IterableWrapper(roots, deepcopy=False)


def _length(node: Any, length: int) -> int:
    if length >= 0:
        return length
    raise TypeError(f"{type(node).__name__} instance doesn't have valid length")


class FileLister(IterDataPipe[str]):
    """Yields the files under each root (functional name: ``list_files``).

    Same as torch's FileLister, for local paths and any fsspec URL (``s3://bucket/dir``):
    ``root`` is a path, a list of them, or a pipe yielding them; a root may be a
    directory, a file or a glob. ``masks`` filter basenames (fnmatch); results are sorted
    per root (``non_deterministic`` is accepted and ignored); ``abspath`` makes local
    paths absolute; ``storage_options`` go to fsspec. Listing happens at the first pull.
    State: the root being listed and the index in it (resuming lists that root again).
    """

    def __init__(
        self,
        root: str | Sequence[str] | IterDataPipe[str] = ".",
        masks: str | list[str] = "",
        *,
        recursive: bool = False,
        abspath: bool = False,
        non_deterministic: bool = False,
        length: int = -1,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.datapipe = _as_pipe(root)
        self.masks = masks
        self.recursive = recursive
        self.abspath = abspath
        self.non_deterministic = non_deterministic
        self.length = length
        self.storage_options = dict(storage_options or {})

    def _list(self, root: str) -> list[str]:
        files = list_files(
            root, self.masks, recursive=self.recursive, storage_options=self.storage_options
        )
        if self.abspath:
            files = [os.path.abspath(path) if is_local(path) else path for path in files]
        return files

    def _make_cursor(self, state: StateDict | None) -> Cursor[str]:
        return _ListerCursor(self, state)

    def __len__(self) -> int:
        return _length(self, self.length)


class _ListerCursor(ExpandingCursor[str]):
    def __init__(self, node: FileLister, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "FileLister", ErrorPolicy("raise"))
        self._list = node._list

    def expand(self, item: Any, position: Any) -> Expansion[str]:
        files = self._list(str(item))
        for index in range(int(position or 0), len(files)):
            yield files[index], index + 1


class FileOpener(IterDataPipe[tuple[str, IO[Any]]]):
    """Opens each path and yields ``(path, stream)`` (functional name: ``open_files``).

    Same as torch's FileOpener (``mode`` ``"r"``/``"t"``/``"rt"`` for text, ``"b"``/``"rb"``
    for bytes), for local paths and fsspec URLs. Remote files are streamed in
    ``block_size`` ranges (never downloaded whole) or, with a `ShardCache`, read from and
    copied into a local cache; ``remote`` sets their timeouts and retries (default:
    `RemoteOptions.from_env`). ``http(s)``/``s3`` objects are requested at the first read,
    so a missing one fails there. A path that names its successor (`UrlWithNext`) has the
    successor opened early, its first window requested once the current file's first
    answer is in (remote objects with read-ahead, no cache), and kept for the next pull.
    A file that cannot be opened raises `SampleError` naming
    it, or is counted and skipped under ``on_error="skip"`` (or an `ErrorPolicy`).
    Streams belong to the consumer, who closes them (``load_from_tar`` and
    ``read_from_stream`` close each stream when done with it or when their run ends).
    """

    def __init__(
        self,
        datapipe: IterDataPipe[str],
        mode: str = "r",
        encoding: str | None = None,
        length: int = -1,
        *,
        storage_options: Mapping[str, Any] | None = None,
        cache: ShardCache | None = None,
        block_size: int = DEFAULT_BLOCK_BYTES,
        on_error: OnError | ErrorPolicy = "raise",
        remote: RemoteOptions | None = None,
    ) -> None:
        if mode not in ("b", "t", "rb", "rt", "r"):
            raise ValueError(f"Invalid mode {mode}")
        if "b" in mode and encoding is not None:
            raise ValueError("binary mode doesn't take an encoding argument")
        self.datapipe = datapipe
        self.mode = mode
        self.encoding = encoding
        self.length = length
        self.storage_options = dict(storage_options or {})
        self.cache = cache
        self.block_size = block_size
        self.policy = as_policy(on_error)
        self.remote = remote

    def _open(self, path: str, early: IO[bytes] | None = None) -> IO[Any]:
        stream = early or open_url(
            path, self.storage_options, self.block_size, self.cache, self.remote
        )
        if "b" in self.mode:
            return stream
        return io.TextIOWrapper(stream, encoding=self.encoding)

    def _open_early(self, path: str, after: IO[Any]) -> IO[bytes] | None:
        if self.cache is not None:
            return None  # a cached file may need no network at all
        raw = getattr(after, "buffer", after)  # a text stream's bytes
        try:
            return open_early(path, self.storage_options, self.block_size, self.remote, raw)
        except Exception:  # opening it when it is needed says what is wrong, in order
            return None

    def _make_cursor(self, state: StateDict | None) -> Cursor[tuple[str, IO[Any]]]:
        return _OpenerCursor(self, state)

    def reopen(self, path: str) -> IO[Any]:
        """Open ``path`` again (to read items at known positions); the caller closes it."""
        return self._open(path)

    def __len__(self) -> int:
        return _length(self, self.length)


class _OpenerCursor(SourceCursor[tuple[str, IO[Any]]]):
    def __init__(self, node: FileOpener, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "FileOpener")
        self._node = node
        self._policy = node.policy
        self._early: tuple[str, IO[bytes]] | None = None  # this consumer's next file

    def next(self) -> tuple[str, IO[Any]]:
        while True:
            try:
                path = self.source.nonblocking_next()
            except StopIteration:
                self._policy.end_of_stream()
                self._drop_early()
                raise
            try:
                stream = self._node._open(path, self._take_early(path))
            except Exception as error:  # OSError, or an HTTP/S3 client error
                reason = f"cannot open: {type(error).__name__}: {error}"
                self._policy.handle(SampleError(reason, str(path)))
                continue
            following = getattr(path, "next_url", None)
            if following is not None:
                early = self._node._open_early(str(following), stream)
                self._early = None if early is None else (str(following), early)
            return path, stream

    def _take_early(self, path: str) -> IO[bytes] | None:
        """The stream opened early for ``path``, if that is the one (else it is closed)."""
        early, self._early = self._early, None
        if early is None:
            return None
        if early[0] == str(path):
            return early[1]
        early[1].close()
        return None

    def _drop_early(self) -> None:
        early, self._early = self._early, None
        if early is not None:
            early[1].close()

    def close(self) -> None:
        self._drop_early()
        super().close()


class StreamReader(IterDataPipe[tuple[str, bytes]]):
    """Reads ``(path, stream)`` pairs into ``(path, bytes)`` (functional: ``read_from_stream``).

    Same as torch's StreamReader: the whole stream, or ``chunk`` bytes at a time, each
    stream closed at its end. State: the stream's source item and the byte offset
    (resuming seeks there).
    """

    def __init__(self, datapipe: IterDataPipe[tuple[str, IO[bytes]]], chunk: int | None = None):
        self.datapipe = datapipe
        self.chunk = chunk

    def _make_cursor(self, state: StateDict | None) -> Cursor[tuple[str, bytes]]:
        return _ReaderCursor(self, state)


class _ReaderCursor(ExpandingCursor[tuple[str, bytes]]):
    def __init__(self, node: StreamReader, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "StreamReader", ErrorPolicy("raise"))
        self._chunk = -1 if node.chunk is None else node.chunk

    def expand(self, item: Any, position: Any) -> Expansion[tuple[str, bytes]]:
        path, stream = item
        offset = int(position or 0)
        if offset:
            stream.seek(offset)
        while True:
            data = stream.read(self._chunk)
            if not data:
                return
            offset += len(data)
            yield (path, data), offset

    def release(self, item: Any) -> None:
        item[1].close()


register_functional("list_files", FileLister)
register_functional("open_files", FileOpener)
register_functional("read_from_stream", StreamReader)
