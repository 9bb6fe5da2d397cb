"""A local, size-bounded LRU cache of remote shards, safe for many processes at once.

The first read of a shard streams it from the remote store *and* copies the bytes into a
private temporary file beside the cache; once the stream has been read to its end, the
temporary file is renamed into place (``os.replace``, atomic), so other processes see
either nothing or a complete shard, never a partial one. Later opens read the local copy
and refresh its modification time, which orders eviction (least recently used first).
Eviction runs after each new entry, under an exclusive ``flock`` on ``<dir>/.lock``; an
entry removed while another process reads it stays readable through that reader's open
descriptor (POSIX). Shards are assumed immutable: a URL's bytes never change.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import IO, cast

__all__ = ["ShardCache"]

_TEMP_PREFIX = ".tmp-"
_LOCK_NAME = ".lock"
_DRAIN_LIMIT_BYTES = 1 << 20  # finish a partly read shard on close if this little is left
_STALE_TEMP_S = 24 * 3600.0


class ShardCache:
    """Cache of whole remote files in ``directory``, at most ``max_bytes`` in total.

    Picklable (only the directory and the bound travel), so every worker process uses the
    same directory. ``hits`` and ``misses`` count this process's opens.
    """

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"ShardCache: max_bytes must be positive, got {max_bytes}")
        self.directory = os.fspath(directory)
        self.max_bytes = int(max_bytes)
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"ShardCache({self.directory!r}, max_bytes={self.max_bytes})"

    def entry_path(self, url: str) -> str:
        """Where ``url`` is (or would be) cached."""
        digest = hashlib.sha256(url.encode()).hexdigest()[:32]
        name = url.rstrip("/").rsplit("/", 1)[-1][-80:]
        return os.path.join(self.directory, f"{digest}-{name}")

    def open(self, url: str, fetch: Callable[[], IO[bytes]]) -> IO[bytes]:
        """A reader of ``url``: the cached copy, or ``fetch()`` teed into the cache."""
        path = self.entry_path(url)
        try:
            local = open(path, "rb")  # noqa: SIM115 - returned to the caller
        except FileNotFoundError:
            os.makedirs(self.directory, exist_ok=True)
            self.misses += 1
            return cast(IO[bytes], _TeeReader(fetch(), self, path))
        with contextlib.suppress(OSError):
            os.utime(path)
        self.hits += 1
        return local

    def usage_bytes(self) -> int:
        """Bytes held by complete entries."""
        return sum(size for _, size, _ in self._entries())

    def _entries(self) -> list[tuple[str, int, float]]:
        found = []
        try:
            with os.scandir(self.directory) as listing:
                for entry in listing:
                    if entry.name.startswith("."):
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        stat = entry.stat()
                        found.append((entry.path, stat.st_size, stat.st_mtime))
        except FileNotFoundError:
            return []
        return found

    def _commit(self, temp_path: str, path: str) -> None:
        os.replace(temp_path, path)
        self._evict()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        with open(os.path.join(self.directory, _LOCK_NAME), "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _evict(self) -> None:
        with self._locked():
            entries = sorted(self._entries(), key=lambda entry: entry[2])
            total = sum(size for _, size, _ in entries)
            for path, size, _ in entries:
                if total <= self.max_bytes:
                    break
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                total -= size
            self._remove_stale_temps()

    def _remove_stale_temps(self) -> None:
        now = time.time()
        with os.scandir(self.directory) as listing:
            for entry in listing:
                if not entry.name.startswith(_TEMP_PREFIX):
                    continue
                pid = entry.name[len(_TEMP_PREFIX) :].split("-", 1)[0]
                with contextlib.suppress(FileNotFoundError, ValueError):
                    if not _alive(int(pid)) or now - entry.stat().st_mtime > _STALE_TEMP_S:
                        os.unlink(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _TeeReader(io.RawIOBase):
    """Reads a remote stream and copies what is read into a temp file for the cache.

    A seek away from the current position abandons the copy (the cache then simply misses
    next time); close() commits the copy when the whole stream was read (or finishes
    reading it when less than 1 MiB is left, e.g. a tar's end padding).
    """

    def __init__(self, remote: IO[bytes], cache: ShardCache, path: str) -> None:
        super().__init__()
        self._remote = remote
        self._cache = cache
        self._path = path
        name = f"{_TEMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._temp_path = os.path.join(cache.directory, name)
        self._temp: IO[bytes] | None = open(self._temp_path, "wb")  # noqa: SIM115
        self._position = 0
        self._eof = False

    @property
    def size(self) -> int | None:
        """The remote file's size, when its reader knows it."""
        size = getattr(self._remote, "size", None)
        return size if isinstance(size, int) else None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return bool(self._remote.seekable())

    def tell(self) -> int:
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        data = self._remote.read(-1 if size is None else size)
        if self._temp is not None:
            self._temp.write(data)
        self._position += len(data)
        if not data and (size is None or size != 0):
            self._eof = True
        return data

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = self._remote.seek(offset, whence)
        if target != self._position:
            self._abandon()
        self._position = target
        return target

    def _abandon(self) -> None:
        temp, self._temp = self._temp, None
        if temp is not None:
            temp.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._temp_path)

    def _drain(self) -> None:
        size = self.size
        if size is None or size - self._position > _DRAIN_LIMIT_BYTES:
            return
        while self.read(1 << 16):
            pass

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._temp is not None and not self._eof:
                with contextlib.suppress(Exception):
                    self._drain()
            temp, self._temp = self._temp, None
            if temp is not None:
                temp.close()
                if self._eof:
                    self._cache._commit(self._temp_path, self._path)
                else:
                    os.unlink(self._temp_path)
        finally:
            self._remote.close()
            super().close()
