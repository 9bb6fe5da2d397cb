"""A local, size-bounded LRU cache of remote shards, safe for many processes at once.

The first read of a shard streams it from the remote store *and* copies the bytes into a
private temporary file beside the cache; once the stream has been read to its end, the
temporary file is renamed into place (``os.replace``, atomic) with a record of its size and
CRC-32 (`conveyor.storage.cache_entries`), so other processes see either nothing or a
complete shard, never a partial one. Later opens check the entry against its record before
serving a byte (a truncated or corrupted entry is removed and fetched again) and refresh
its modification time, which orders eviction (least recently used first). Eviction runs
after each new entry, under an exclusive ``flock`` on ``<dir>/.lock``; an entry removed
while another process reads it stays readable through that reader's open descriptor.

The cache is an optimisation, never a point of failure: a directory that cannot be written
(read-only, full, gone) makes the shard stream from its source instead, with one
`ShardCacheWarning` per process and directory. And it is never a way in: the directory
must belong to the user and be writable by nobody else (it is created ``0700``), or the
cache is not used at all (warned once); entries are created ``0600``.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import time
import uuid
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any, cast

from conveyor.storage.cache_entries import (
    entry_name,
    open_verified,
    record_path,
    remove_entry,
    write_record,
)

__all__ = ["ShardCache", "ShardCacheWarning"]

_TEMP_PREFIX = ".tmp-"
_LOCK_NAME = ".lock"
_DRAIN_LIMIT_BYTES = 1 << 20  # finish a partly read shard on close if this little is left
_STALE_TEMP_S = 24 * 3600.0
_warned: set[tuple[int, str, str]] = set()


class ShardCacheWarning(UserWarning):
    """The shard cache is bypassed (the shard streams from its source): the directory is
    not private, cannot be written, or is full."""


def _warn_once(directory: str, kind: str, message: str) -> None:
    key = (os.getpid(), directory, kind)
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, ShardCacheWarning, stacklevel=4)


class ShardCache:
    """Cache of whole remote files in ``directory``, at most ``max_bytes`` in total.

    Picklable (only the directory and the bound travel), so every worker process uses the
    same directory. ``hits``, ``misses`` and ``bypassed`` (opens that streamed without the
    cache, for a reason warned about) count this process's opens; ``rejected`` counts
    entries that failed their check and were fetched again.
    """

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"ShardCache: max_bytes must be positive, got {max_bytes}")
        self.directory = os.fspath(directory)
        self.max_bytes = int(max_bytes)
        self.hits = 0
        self.misses = 0
        self.bypassed = 0
        self.rejected = 0

    def __repr__(self) -> str:
        return f"ShardCache({self.directory!r}, max_bytes={self.max_bytes})"

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.directory = state["directory"]
        self.max_bytes = state["max_bytes"]
        self.hits = self.misses = self.bypassed = self.rejected = 0

    def entry_path(self, url: str, storage_options: Mapping[str, Any] | None = None) -> str:
        """Where ``url`` (read with ``storage_options``) is, or would be, cached."""
        return os.path.join(self.directory, entry_name(url, storage_options))

    def open(
        self,
        url: str,
        fetch: Callable[[], IO[bytes]],
        storage_options: Mapping[str, Any] | None = None,
    ) -> IO[bytes]:
        """A reader of ``url``: the cached copy if it checks out, else ``fetch()`` teed into
        the cache (or, when the cache cannot be used, ``fetch()`` alone)."""
        if not self._usable():
            self.bypassed += 1
            return fetch()
        path = self.entry_path(url, storage_options)
        local = open_verified(path)
        if local is not None:
            with contextlib.suppress(OSError):
                os.utime(path)
            self.hits += 1
            return local
        if os.path.lexists(path) or os.path.lexists(record_path(path)):
            self.rejected += 1  # truncated, corrupted, half-written or not ours: fetch again
            remove_entry(path)
        self.misses += 1
        remote = fetch()
        try:
            temp = self._new_temp()
        except OSError as error:
            self._bypass("write", f"cannot write to the shard cache {self.directory!r} ({error})")
            return remote
        return cast(IO[bytes], _TeeReader(remote, self, path, url, temp))

    def _usable(self) -> bool:
        """The directory exists (made ``0700`` if not), is ours and is writable by nobody
        else; otherwise the cache is bypassed, with one warning."""
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            info = os.stat(self.directory)
        except OSError as error:
            self._bypass("create", f"cannot create the shard cache {self.directory!r} ({error})")
            return False
        where = f"the shard cache {self.directory!r}"
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            self._bypass("owner", f"{where} is not a directory of this user: not used")
            return False
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            reason = "can be written by other users (who could plant a shard there)"
            self._bypass("mode", f"{where} {reason}: not used; chmod 700 it")
            return False
        return True

    def _bypass(self, kind: str, reason: str) -> None:
        _warn_once(self.directory, kind, f"{reason}; shards stream from their source instead")

    def _new_temp(self) -> tuple[str, IO[bytes]]:
        name = f"{_TEMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path = os.path.join(self.directory, name)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        return path, open(descriptor, "wb")

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
                        info = entry.stat(follow_symlinks=False)
                        found.append((entry.path, info.st_size, info.st_mtime))
        except FileNotFoundError:
            return []
        return found

    def _commit(self, temp_path: str, path: str, url: str, size: int, crc32: int) -> None:
        """Record, then rename into place (a reader in between finds a record that does not
        match the old bytes, if any, and fetches again)."""
        try:
            write_record(path, f"{temp_path}.meta", url, size, crc32)
            os.replace(temp_path, path)
        except OSError as error:
            for leftover in (temp_path, f"{temp_path}.meta"):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
            self._bypass("write", f"cannot write to the shard cache {self.directory!r} ({error})")
            return
        self._evict()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        descriptor = os.open(os.path.join(self.directory, _LOCK_NAME), os.O_RDWR | os.O_CREAT,
                             0o600)  # fmt: skip
        with open(descriptor, "r+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _evict(self) -> None:
        with contextlib.suppress(OSError), self._locked():
            entries = sorted(self._entries(), key=lambda entry: entry[2])
            total = sum(size for _, size, _ in entries)
            for path, size, _ in entries:
                if total <= self.max_bytes:
                    break
                remove_entry(path)
                total -= size
            self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Temp files of dead processes (or a day old), and records without an entry."""
        now = time.time()
        with os.scandir(self.directory) as listing:
            for entry in listing:
                name = entry.name
                if name.startswith(".") and name.endswith(".meta") and "tmp-" not in name:
                    data = os.path.join(self.directory, name[1 : -len(".meta")])
                    if not os.path.lexists(data):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.path)
                    continue
                if not name.startswith(_TEMP_PREFIX):
                    continue
                pid = name[len(_TEMP_PREFIX) :].split("-", 1)[0]
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
    next time); so does a failed write (a full disk: one warning, reading goes on from the
    source). close() commits the copy when the whole stream was read (or finishes reading
    it when less than 1 MiB is left, e.g. a tar's end padding).
    """

    def __init__(
        self,
        remote: IO[bytes],
        cache: ShardCache,
        path: str,
        url: str,
        temp: tuple[str, IO[bytes]],
    ) -> None:
        super().__init__()
        self._remote = remote
        self._cache = cache
        self._path = path
        self._url = url
        self._temp_path, file = temp
        self._temp: IO[bytes] | None = file
        self._crc32 = 0
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
        if self._temp is not None and data:
            self._copy(data)
        self._position += len(data)
        if not data and (size is None or size != 0):
            self._eof = True
        return data

    def _copy(self, data: bytes) -> None:
        assert self._temp is not None
        try:
            self._temp.write(data)
        except OSError as error:  # ENOSPC, EDQUOT, EIO: the copy is lost, the read is not
            self._abandon()
            self._cache._bypass(
                "write", f"cannot write to the shard cache {self._cache.directory!r} ({error})"
            )
            return
        self._crc32 = zlib.crc32(data, self._crc32)

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
            with contextlib.suppress(OSError):
                temp.close()
            with contextlib.suppress(OSError):
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
            self._finish_copy()
        finally:
            self._remote.close()
            super().close()

    def _finish_copy(self) -> None:
        temp, self._temp = self._temp, None
        if temp is None:
            return
        try:
            temp.close()
        except OSError as error:  # the last buffered bytes did not fit
            self._eof = False
            self._cache._bypass(
                "write", f"cannot write to the shard cache {self._cache.directory!r} ({error})"
            )
        if self._eof:
            self._cache._commit(self._temp_path, self._path, self._url, self._position,
                                self._crc32)  # fmt: skip
        else:
            with contextlib.suppress(OSError):
                os.unlink(self._temp_path)
