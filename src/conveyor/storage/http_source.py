"""HTTP(S) objects for `RangedReader`: ranged GETs on the aiohttp session of fsspec's
HTTPFileSystem (its event loop, connection pool, headers and auth).

Timeouts are aiohttp's own (``ClientTimeout(sock_connect=..., sock_read=...)``, set by
`http_client_timeout` when the file system is created); retries are `RangedReader`'s, so
a failed request continues at the byte offset reached. 429, and 503 with ``Retry-After``,
are throttles: waited out as long as the server asks.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any
from urllib.parse import urlsplit

from conveyor.storage.answers import Answer
from conveyor.storage.options import RemoteOptions
from conveyor.storage.retry import Failure, classify_builtin, is_retryable_status, retry_after_s
from conveyor.storage.warm_pool import warm_pool

__all__ = [
    "HttpSource",
    "HttpStatusError",
    "classify_http",
    "host_of",
    "http_client_timeout",
    "status_failure",
]

_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")


def http_client_timeout(options: RemoteOptions) -> Any:
    """An ``aiohttp.ClientTimeout`` with our connect and read timeouts and no total limit
    (a long shard on a slow link is fine as long as bytes keep coming)."""
    import aiohttp

    return aiohttp.ClientTimeout(
        total=None, sock_connect=options.connect_timeout_s, sock_read=options.read_timeout_s
    )


class HttpStatusError(OSError):
    """An HTTP answer with an error status (kept apart from aiohttp's own error types);
    ``retry_after``: the seconds its ``Retry-After`` header asked for, if any."""

    def __init__(
        self, status: int, reason: str, url: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"HTTP {status} {reason}".rstrip())
        self.status = status
        self.url = url
        self.retry_after = retry_after


def status_failure(
    status: int, reason: str, retry_after: float | None = None, slow_down: bool = False
) -> Failure:
    """An error status: 404/410 are "not found", 412 a changed object, 5xx/408/429 retried;
    429, and 503 that says ``Retry-After`` or is S3's ``SlowDown``, are throttles."""
    if status in (404, 410):
        return Failure(reason, retryable=False, status=status, missing=True)
    if status == 412:
        reason += " (the object changed while it was read: its ETag differs)"
        return Failure(reason, retryable=False, status=status, changed=True)
    throttled = status == 429 or (status == 503 and (retry_after is not None or slow_down))
    if retry_after is not None and throttled:
        reason += f" (Retry-After: {retry_after:.3g} s)"
    return Failure(
        reason,
        is_retryable_status(status),
        status,
        throttled=throttled,
        retry_after=retry_after if throttled else None,
    )


def host_of(url: str) -> str:
    """The host (and port) of ``url``, without user-info: what a per-host limit is for."""
    return urlsplit(url).netloc.rpartition("@")[2].lower()


def classify_http(error: BaseException, options: RemoteOptions) -> Failure:
    """Retryable: 5xx/408/429, timeouts, refused/reset/closed connections, cut bodies."""
    import aiohttp

    if isinstance(error, HttpStatusError):
        return status_failure(error.status, str(error), error.retry_after)
    if isinstance(error, aiohttp.ClientResponseError):  # fsspec's listing raises these
        headers: Any = error.headers or {}
        waited = retry_after_s(headers.get("Retry-After"))
        return status_failure(error.status, f"HTTP {error.status} {error.message}".rstrip(), waited)
    if isinstance(error, aiohttp.ConnectionTimeoutError):
        return Failure(f"no connection within {options.connect_timeout_s:g} s", retryable=True)
    if isinstance(error, TimeoutError):
        return Failure(f"no data within {options.read_timeout_s:g} s (timed out)", True)
    if isinstance(error, aiohttp.ClientConnectorError):
        refused = isinstance(error.os_error, ConnectionRefusedError)
        reason = "connection refused" if refused else f"cannot connect: {error.os_error}"
        return Failure(reason, retryable=True, refused=refused)
    if isinstance(error, aiohttp.ClientPayloadError):
        return Failure(f"answer cut short: {error}", retryable=True)
    if isinstance(error, aiohttp.ClientError):
        return Failure(f"{type(error).__name__}: {error}", retryable=True)
    return classify_builtin(error, options.read_timeout_s) or Failure(
        f"{type(error).__name__}: {error}", retryable=False
    )


def _content_range(header: str | None) -> tuple[int | None, int | None, int | None]:
    match = _CONTENT_RANGE.match(header or "")
    if match is None:
        return None, None, None
    first, last, total = match.groups()
    return (
        None if first is None else int(first),
        None if last is None else int(last) + 1,
        None if total == "*" else int(total),
    )


class HttpSource:
    """One URL read by ranged GETs through fsspec's ``HTTPFileSystem`` ``fs``."""

    def __init__(self, fs: Any, url: str, options: RemoteOptions) -> None:
        self.fs = fs
        self.url = url
        self.options = options
        self.host = host_of(url)

    async def arequest(self, start: int, end: int, etag: str | None) -> Answer:
        session = await self.fs.set_session()
        kwargs = dict(self.fs.kwargs)
        headers = dict(kwargs.pop("headers", None) or {})
        headers["Range"] = f"bytes={start}-{end - 1}"
        headers["Accept-Encoding"] = "identity"
        if etag is not None:
            headers["If-Match"] = etag
        response = await session.get(self.fs.encode_url(self.url), headers=headers, **kwargs)
        status = response.status
        version = response.headers.get("ETag"), response.headers.get("Last-Modified")
        if status == 206:
            first, last, total = _content_range(response.headers.get("Content-Range"))
            length = response.content_length
            first = start if first is None else first
            last = last if last is not None else (None if length is None else first + length)
            return Answer(response, first, last, total, *version)
        if status == 200:  # the whole object: a server that ignores Range
            length = response.content_length
            return Answer(response, 0, length, length, *version)
        response.release()
        if status == 416:  # asked past the end
            _, _, total = _content_range(response.headers.get("Content-Range"))
            return Answer(None, start, start, start if total is None else total)
        waited = retry_after_s(response.headers.get("Retry-After"))
        raise HttpStatusError(status, response.reason or "", self.url, waited)

    async def awarm(self, connections: int) -> None:
        with contextlib.suppress(Exception):  # the requests will meet the failure themselves
            session = await self.fs.set_session()
            await warm_pool(session, self.fs.encode_url(self.url), connections)

    @staticmethod
    async def aread(answer: Answer, at_most: int) -> tuple[bytes, BaseException | None]:
        if answer.handle is None:
            return b"", None
        try:  # what has arrived, up to at_most (waiting only while nothing has)
            return await answer.handle.content.read(at_most), None
        except Exception as error:
            return b"", error

    @staticmethod
    async def arelease(response: Any) -> None:
        if response is not None:
            response.close()  # drops the connection unless the body was read to its end

    def classify(self, error: BaseException) -> Failure:
        return classify_http(error, self.options)
