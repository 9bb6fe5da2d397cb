"""File systems behind one small interface: local paths natively, everything else via fsspec.

A URL without a scheme (or with ``file://``) is a local path and needs nothing beyond the
standard library. Other schemes (``s3://``, ``http(s)://``, ``gs://``, ``memory://``, ...)
go through fsspec, installed with ``pip install conveyor[remote]``. Reads are streaming:
remote files are fetched in ``block_size`` ranges as they are read, never downloaded whole.
``http(s)://`` and ``s3://`` objects are read by `RangedReader` (a window of ranged
requests ahead; timeouts, retries and throttling of `RemoteOptions`, resuming at the byte
offset reached); other schemes use their fsspec driver's own file object, timeouts and
retries. `open_early` starts reading an object before it is opened (a consumer's next
shard); listing calls are counted (`conveyor.storage.request_counts`).

fsspec file-system objects are created once per process and per set of options (a forked
worker makes its own: event loops and connections do not survive a fork) and kept until
`release_connections`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar, cast

from conveyor.storage.answers import RangeSource
from conveyor.storage.options import RemoteOptions
from conveyor.storage.ranged import RangedReader
from conveyor.storage.redaction import redact_url
from conveyor.storage.request_tally import count
from conveyor.storage.retry import Failure, RetryRun

if TYPE_CHECKING:
    from conveyor.storage.cache import ShardCache

T = TypeVar("T")

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "FileSystem",
    "LocalFileSystem",
    "RemoteFileSystem",
    "get_filesystem",
    "has_glob",
    "is_local",
    "list_files",
    "open_early",
    "open_url",
    "release_connections",
    "scheme_of",
]

DEFAULT_BLOCK_BYTES = 8 << 20
"""Remote reads fetch ranges of this size (one request per 8 MiB of a shard)."""

_REMOTE_HINT = "pip install conveyor[remote]"


class FileSystem(Protocol):
    """What conveyor needs from a file system; every path is a full URL."""

    def find(self, url: str, recursive: bool) -> list[str]:
        """Files directly in (or, if ``recursive``, anywhere below) directory ``url``, in a
        deterministic order."""
        ...

    def isdir(self, url: str) -> bool:
        """True if ``url`` names a directory (or an object-store prefix)."""
        ...

    def glob(self, pattern: str) -> list[str]:
        """Files matching a ``*?[`` pattern, sorted."""
        ...

    def open(self, url: str, block_size: int) -> IO[bytes]:
        """A binary, seekable where possible, streaming reader; the caller closes it."""
        ...

    def size(self, url: str) -> int:
        """The file's size in bytes."""
        ...


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def scheme_of(url: str) -> str:
    """The URL's scheme, lower case (``""`` for a plain path)."""
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else ""


def is_local(url: str) -> bool:
    """True for plain paths and ``file://`` URLs."""
    return scheme_of(url) in ("", "file")


def has_glob(url: str) -> bool:
    """``*?[`` in the path; an HTTP(S) URL's query (a presigned URL's signature) is no glob."""
    path = url.split("://", 1)[-1]
    if scheme_of(url) in ("http", "https"):
        path = path.split("?", 1)[0]
    return any(char in path for char in "*?[")


def _local_path(url: str) -> str:
    return url[len("file://") :] if url.startswith("file://") else url


class LocalFileSystem:
    """Plain files through the standard library; URLs keep the form they were given in."""

    def find(self, url: str, recursive: bool) -> list[str]:
        """Top-down as torch's FileLister: a directory's sorted files, then its sorted subdirs."""
        prefix = "file://" if url.startswith("file://") else ""
        found: list[str] = []
        for dirpath, dirs, files in os.walk(_local_path(url)):
            found.extend(prefix + os.path.join(dirpath, name) for name in sorted(files))
            if not recursive:
                break
            dirs.sort()
        return found

    def isdir(self, url: str) -> bool:
        return os.path.isdir(_local_path(url))

    def glob(self, pattern: str) -> list[str]:
        import glob

        prefix = "file://" if pattern.startswith("file://") else ""
        matches = glob.glob(_local_path(pattern), recursive=True)
        return sorted(prefix + path for path in matches if os.path.isfile(path))

    def open(self, url: str, block_size: int) -> IO[bytes]:
        return open(_local_path(url), "rb", buffering=min(block_size, 1 << 20))

    def size(self, url: str) -> int:
        return os.path.getsize(_local_path(url))


_HTTP_SCHEMES = frozenset({"http", "https"})
_S3_SCHEMES = frozenset({"s3", "s3a"})


def require_async(fs: Any, scheme: str) -> None:
    """conveyor's ranged reads run on the driver's event loop: an old, synchronous driver
    (s3fs before 2021, say, which pip may pick to please another package's pins) gets a
    clear error instead of ``'S3FileSystem' object has no attribute 'loop'``."""
    from fsspec.asyn import AsyncFileSystem

    if isinstance(fs, AsyncFileSystem):
        return
    package = type(fs).__module__.split(".")[0]
    version = getattr(sys.modules.get(package), "__version__", "unknown version")
    raise ImportError(
        f"conveyor reads {scheme}:// through an asynchronous fsspec file system, and "
        f"{type(fs).__name__} from {package} {version} is not one. Install conveyor's remote "
        "extra, which needs s3fs>=2024.2 and aiohttp>=3.9: pip install 'conveyor[remote]' "
        "(if another package pins an older s3fs, resolve both in one pip command)."
    )


class RemoteFileSystem:
    """An fsspec file system; paths are returned as full URLs (scheme included).

    HTTP(S) and S3 objects open as `RangedReader`s; listing calls are retried as reads
    are (per ``options``), other schemes rely on their driver.
    """

    def __init__(self, fs: Any, scheme: str = "", options: RemoteOptions | None = None) -> None:
        self.fs = fs
        self.scheme = scheme
        self.options = options or RemoteOptions()

    def _url(self, path: str) -> str:
        return str(self.fs.unstrip_protocol(path))

    def _source(self, url: str) -> RangeSource | None:
        if self.scheme in _HTTP_SCHEMES | _S3_SCHEMES:
            require_async(self.fs, self.scheme)
        if self.scheme in _HTTP_SCHEMES:
            from conveyor.storage.http_source import HttpSource

            return HttpSource(self.fs, url, self.options)
        if self.scheme in _S3_SCHEMES:
            from conveyor.storage.s3_source import S3Source

            return S3Source(self.fs, url, self.options)
        return None

    def _classify(self, error: BaseException) -> Failure:
        if self.scheme in _S3_SCHEMES:
            from conveyor.storage.s3_source import classify_s3

            return classify_s3(error, self.options)
        from conveyor.storage.http_source import classify_http

        return classify_http(error, self.options)

    def _retrying(self, url: str, call: Callable[[], T]) -> T:
        """``call()``, tried again on retryable failures; a missing object raises
        FileNotFoundError (URL redacted), other failures raise as they are."""
        if self.scheme not in _HTTP_SCHEMES | _S3_SCHEMES:
            return call()
        run = RetryRun(self.options, url)
        while True:
            try:
                result = call()
            except Exception as error:
                failure = self._classify(error)
                if not failure.retryable and not failure.missing:
                    raise
                run.failed(failure, None)  # a missing object: FileNotFoundError, URL redacted
            else:
                run.reset()  # the host answered
                return result

    def _listing(self, url: str, call: Callable[[], T]) -> T:
        count("listings")
        return self._retrying(url, call)

    def find(self, url: str, recursive: bool) -> list[str]:
        depth = None if recursive else 1
        paths = self._listing(url, lambda: self.fs.find(url, maxdepth=depth, withdirs=False))
        return sorted(self._url(path) for path in paths)

    def isdir(self, url: str) -> bool:
        return bool(self._listing(url, lambda: self.fs.isdir(url)))

    def glob(self, pattern: str) -> list[str]:
        return sorted(
            self._url(path) for path in self._listing(pattern, lambda: self.fs.glob(pattern))
        )

    def open(self, url: str, block_size: int) -> IO[bytes]:
        source = self._source(url)
        if source is not None:
            return cast(IO[bytes], RangedReader(source, self.options, block_size))
        stream: IO[bytes] = self.fs.open(url, "rb", block_size=block_size, cache_type="readahead")
        return stream

    def open_early(self, url: str, block_size: int, after: IO[bytes] | None) -> IO[bytes] | None:
        """``url`` opened with its first window requested now (once ``after``, the stream
        read before it, has had its first answer); None when read-ahead is off here."""
        source = self._source(url) if self.options.read_ahead > 0 else None
        if source is None:
            return None
        reader = RangedReader(source, self.options, block_size)
        return cast(IO[bytes], reader.start(after if isinstance(after, RangedReader) else None))

    def size(self, url: str) -> int:
        source = self._source(url)
        if source is None:
            return int(self.fs.size(url))
        one_at_a_time = dataclasses.replace(self.options, read_ahead=0)
        with RangedReader(source, one_at_a_time, 1) as reader:  # a 1-byte GET gives the size
            reader.read(1)
            size = reader.size
        if size is None:
            raise OSError(f"{redact_url(url)}: the server does not say the object's size")
        return int(size)


_LOCAL = LocalFileSystem()
_remote: dict[tuple[int, str, str, RemoteOptions], RemoteFileSystem] = {}


def _import_fsspec(url: str) -> Any:
    try:
        import fsspec
    except ImportError as error:
        raise ImportError(
            f"reading {redact_url(url)!r} needs fsspec (and s3fs for s3://, aiohttp for "
            f"http(s)://): {_REMOTE_HINT}"
        ) from error
    return fsspec


def _with_defaults(scheme: str, options: dict[str, Any], remote: RemoteOptions) -> None:
    """Add conveyor's timeouts (and, for S3, no botocore retries and a session whose
    parsed service model forked workers inherit) unless the user set them."""
    if scheme in _HTTP_SCHEMES:
        from conveyor.storage.http_source import http_client_timeout

        client = dict(options.get("client_kwargs") or {})
        client.setdefault("timeout", http_client_timeout(remote))
        options["client_kwargs"] = client
    elif scheme in _S3_SCHEMES:
        from conveyor.storage.s3_source import s3_config_defaults, s3_session

        config = dict(options.get("config_kwargs") or {})
        for key, value in s3_config_defaults(remote).items():
            config.setdefault(key, value)
        options["config_kwargs"] = config
        if "session" not in options and "profile" not in options:
            options["session"] = s3_session()


def get_filesystem(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    remote: RemoteOptions | None = None,
) -> FileSystem:
    """The file system for ``url``; ``storage_options`` go to fsspec's constructor.

    ``remote`` sets timeouts and retries (default: `RemoteOptions.from_env`). Raises
    ImportError naming ``pip install conveyor[remote]`` when a remote URL is given and
    fsspec (or the scheme's driver, e.g. s3fs) is missing.
    """
    scheme = scheme_of(url)
    if scheme in ("", "file"):
        return _LOCAL
    remote = remote or RemoteOptions.from_env()
    options = dict(storage_options or {})
    key = (os.getpid(), scheme, repr(sorted(options.items())), remote)
    found = _remote.get(key)
    if found is None:
        fsspec = _import_fsspec(url)
        try:
            _with_defaults(scheme, options, remote)
            fs = fsspec.filesystem(scheme, skip_instance_cache=True, **options)
        except ImportError as error:
            raise ImportError(f"reading {redact_url(url)!r}: {error}; {_REMOTE_HINT}") from error
        found = _remote[key] = RemoteFileSystem(fs, scheme, remote)
    return found


def prepare_remote(
    urls: Sequence[str],
    storage_options: Mapping[str, Any] | None = None,
    remote: RemoteOptions | None = None,
) -> None:
    """Make the file systems of ``urls``' remote schemes here (once each): their drivers
    imported and, for S3, botocore's model parsed. Called in the main process before
    workers fork, so that each worker does not import and parse them itself (8 workers
    of two ranks on 2 cores spent ~3.5 s on that before their first batch)."""
    seen: set[str] = set()
    for url in urls:
        scheme = scheme_of(url)
        if scheme in ("", "file") or scheme in seen:
            continue
        seen.add(scheme)
        get_filesystem(url, storage_options, remote)


def open_url(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    block_size: int = DEFAULT_BLOCK_BYTES,
    cache: ShardCache | None = None,
    remote: RemoteOptions | None = None,
) -> IO[bytes]:
    """Open ``url`` for streaming binary reads; the caller closes the stream.

    With a ``cache``, remote files are read from (or copied into) it; local files never are.
    ``remote``: timeouts and retries of remote reads (default: `RemoteOptions.from_env`).
    A missing object raises FileNotFoundError; other failures that outlast the retries
    raise `RemoteReadError` (an OSError) with the HTTP status and the URL.
    """
    fs = get_filesystem(url, storage_options, remote)
    if cache is None or fs is _LOCAL:
        return fs.open(url, block_size)
    return cache.open(url, lambda: fs.open(url, block_size), storage_options)


def open_early(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    block_size: int = DEFAULT_BLOCK_BYTES,
    remote: RemoteOptions | None = None,
    after: IO[bytes] | None = None,
) -> IO[bytes] | None:
    """``url``, opened now and already being read, for a caller that will read it next
    (after ``after``, whose first answer its requests wait for); the caller closes it.
    None for local files and schemes without read-ahead: open them when needed."""
    if scheme_of(url) not in _HTTP_SCHEMES | _S3_SCHEMES:
        return None
    fs = get_filesystem(url, storage_options, remote)
    if not isinstance(fs, RemoteFileSystem):
        return None
    return fs.open_early(url, block_size, after)


def _masks(masks: str | Iterable[str]) -> list[str]:
    listed = [masks] if isinstance(masks, str) else list(masks)
    return [mask for mask in listed if mask]


def list_files(
    root: str,
    masks: str | Iterable[str] = "",
    *,
    recursive: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    remote: RemoteOptions | None = None,
) -> list[str]:
    """Sorted files under ``root`` whose basename matches any of ``masks`` (all if empty).

    ``root`` may be a directory, a single file, or a glob pattern (``*?[``). Raises
    FileNotFoundError naming ``root`` when nothing exists there.
    """
    fs = get_filesystem(root, storage_options, remote)
    if has_glob(root):
        files = fs.glob(root)
    elif fs.isdir(root):
        files = fs.find(root, recursive)
    else:
        try:
            fs.size(root)
        except FileNotFoundError:
            shown = redact_url(root)
            raise FileNotFoundError(f"list_files: {shown!r} does not exist") from None
        files = [root]
    patterns = _masks(masks)
    if patterns:
        files = [
            path
            for path in files
            if any(fnmatch.fnmatch(path.rsplit("/", 1)[-1], mask) for mask in patterns)
        ]
    return files


def release_connections() -> None:
    """Close this process's remote sessions and forget its fsspec file systems.

    Later calls reconnect. Useful before forking by hand and in tests that count sockets.
    """
    for key in list(_remote):
        remote = _remote.pop(key)
        fs = remote.fs
        if key[0] != os.getpid():
            continue  # inherited through fork: its loop and sockets belong to the parent
        closer = getattr(type(fs), "close_session", None)
        for attribute in ("_session", "_s3creator"):
            session = getattr(fs, attribute, None)
            if closer is not None and session is not None:
                closer(getattr(fs, "loop", None), session)
