"""S3 objects for `RangedReader`: ranged ``GetObject`` calls on s3fs's aiobotocore client.

Timeouts are botocore's (``connect_timeout``, ``read_timeout``); botocore's own retries
are turned off by `s3_config_defaults` so that `RangedReader` alone retries, from the byte
offset reached (botocore would restart a range from its start, s3fs from a block's start).
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

from conveyor.storage.answers import Answer
from conveyor.storage.http_source import classify_http, host_of, status_failure
from conveyor.storage.options import RemoteOptions
from conveyor.storage.retry import Failure, retry_after_s
from conveyor.storage.warm_pool import warm_s3_pool

__all__ = ["S3Source", "classify_s3", "s3_config_defaults"]

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_MISSING_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "404"})
_RETRY_CODES = frozenset(
    {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling"}
)
_THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"}
)


def s3_config_defaults(options: RemoteOptions) -> dict[str, Any]:
    """botocore ``Config`` settings conveyor adds unless the user set them.

    The connection pool (botocore's default: 10) must hold the read-ahead's ranged GETs:
    a widened window and the next shard's, each its own request, and a few to spare (for
    listing); with fewer, requests queue for a connection a round trip at a time."""
    window = options.widest_read_ahead
    return {
        "connect_timeout": options.connect_timeout_s,
        "read_timeout": options.read_timeout_s,
        "retries": {"total_max_attempts": 1},
        "max_pool_connections": max(10, 2 * window + 4),
    }


_POOL_DEFAULT = 10  # botocore's max_pool_connections
_loader: Any = None  # botocore's data loader: kept by forked workers, with what it parsed
_session: tuple[int, Any] | None = None  # (pid, the aiobotocore session of that process)


def s3_session() -> Any:
    """The aiobotocore session conveyor's S3 file systems use in this process (unless the
    user gave a ``session`` or ``profile``).

    Every session of the process shares one botocore data loader, and forked workers
    inherit it with what it already parsed (the S3 service model, the endpoint rules):
    their first client costs milliseconds instead of ~0.1 s of CPU each, which eight
    workers starting at once on two cores paid as 0.85 s before their first request. The
    session itself is made per process (its credential cache may hold locks of its loop).
    """
    global _loader, _session
    import aiobotocore.session  # type: ignore[import-untyped]
    import botocore.loaders  # type: ignore[import-untyped]

    if _session is not None and _session[0] == os.getpid():
        return _session[1]
    if _loader is None:
        _loader = botocore.loaders.create_loader()
        _parse_s3_model(_loader)
    session = aiobotocore.session.AioSession()
    session.register_component("data_loader", _loader)
    _session = (os.getpid(), session)
    return session


def _parse_s3_model(loader: Any) -> None:
    """Have ``loader`` parse what an S3 client needs (a plain botocore client made and
    dropped: no connection is opened), once per process tree."""
    import botocore.session  # type: ignore[import-untyped]

    session = botocore.session.Session()
    session.register_component("data_loader", loader)
    session.create_client(
        "s3", region_name="us-east-1", aws_access_key_id="-", aws_secret_access_key="-"
    ).close()


def _client_error_failure(error: Any) -> Failure:
    response: dict[str, Any] = getattr(error, "response", None) or {}
    metadata = response.get("ResponseMetadata", {})
    status = int(metadata.get("HTTPStatusCode") or 0) or None
    code = str(response.get("Error", {}).get("Code", ""))
    reason = f"HTTP {status} {code}" if status else code or str(error)
    waited = retry_after_s((metadata.get("HTTPHeaders") or {}).get("retry-after"))
    if code in _MISSING_CODES:
        return Failure(reason, retryable=False, status=status, missing=True)
    if code in _THROTTLE_CODES or status == 429:
        if waited is not None:
            reason += f" (Retry-After: {waited:.3g} s)"
        return Failure(reason, True, status, throttled=True, retry_after=waited)
    if code in _RETRY_CODES:
        return status_failure(status, reason, waited) if status else Failure(reason, True)
    if code == "PreconditionFailed":
        status = 412
    return status_failure(status, reason, waited) if status else Failure(reason, retryable=False)


def classify_s3(error: BaseException, options: RemoteOptions) -> Failure:
    """botocore errors by status and code; connection-level ones as for HTTP."""
    from botocore import exceptions

    if isinstance(error, exceptions.ClientError):
        return _client_error_failure(error)
    if isinstance(error, exceptions.ConnectTimeoutError):
        return Failure(f"no connection within {options.connect_timeout_s:g} s", retryable=True)
    if isinstance(error, exceptions.ReadTimeoutError):
        return Failure(f"no data within {options.read_timeout_s:g} s (timed out)", True)
    if isinstance(error, exceptions.EndpointConnectionError):
        cause = getattr(error, "kwargs", {}).get("error")
        refused = "refused" in str(cause).lower() or isinstance(
            getattr(cause, "os_error", None), ConnectionRefusedError
        )
        reason = "connection refused" if refused else f"cannot connect: {error}"
        return Failure(reason, retryable=True, refused=refused)
    if isinstance(error, exceptions.HTTPClientError | exceptions.IncompleteReadError):
        return Failure(f"connection lost: {error}", retryable=True)
    if isinstance(error, exceptions.BotoCoreError):  # credentials, parameters: final
        return Failure(f"{type(error).__name__}: {error}", retryable=False)
    return classify_http(error, options)


class S3Source:
    """One ``s3://bucket/key`` read by ranged ``GetObject`` calls through s3fs's ``fs``."""

    def __init__(self, fs: Any, url: str, options: RemoteOptions) -> None:
        self.fs = fs
        self.url = url
        self.options = options
        self._bucket, self._key, self._version = fs.split_path(url)
        endpoint = getattr(fs, "endpoint_url", None)
        endpoint = endpoint or (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url")
        # a throttling store limits a bucket (a prefix, strictly): one limit per bucket
        self.host = (host_of(endpoint) if endpoint else "s3") + "/" + self._bucket
        # no more requests in flight than botocore has connections (more would wait for
        # one past their turn, and be sent after a throttle they could have heeded)
        pool = (getattr(fs, "config_kwargs", None) or {}).get("max_pool_connections")
        self.most_in_flight = int(pool) if pool else _POOL_DEFAULT

    async def awarm(self, connections: int) -> None:
        with contextlib.suppress(Exception):  # the requests will meet the failure themselves
            await self.fs.set_session()
            await warm_s3_pool(self.fs, self._bucket, connections)

    async def arequest(self, start: int, end: int, etag: str | None) -> Answer:
        from botocore.exceptions import ClientError  # type: ignore[import-untyped]

        await self.fs.set_session()
        client = await self.fs.get_s3(self._bucket)
        asked: dict[str, Any] = {"Bucket": self._bucket, "Key": self._key}
        asked["Range"] = f"bytes={start}-{end - 1}"
        if self._version:
            asked["VersionId"] = self._version
        if etag is not None:
            asked["IfMatch"] = etag
        method = client.get_object
        with contextlib.suppress(AttributeError):  # an s3fs without it: plain arguments
            asked = self.fs._get_s3_method_kwargs(method, **asked)  # SSE-C keys, RequestPayer
        try:
            response = await method(**asked)
        except ClientError as error:
            status = (error.response or {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 416:  # asked past the end
                return Answer(None, start, start, start)
            raise
        match = _CONTENT_RANGE.match(str(response.get("ContentRange", "")))
        length = response.get("ContentLength")
        modified = response.get("LastModified")
        version = response.get("ETag"), None if modified is None else str(modified)
        if match is not None:
            first, last, total = match.groups()
            size = None if total == "*" else int(total)
            return Answer(response["Body"], int(first), int(last) + 1, size, *version)
        return Answer(response["Body"], 0, length, length, *version)

    @staticmethod
    async def aread(answer: Answer, at_most: int) -> tuple[bytes, BaseException | None]:
        if answer.handle is None:
            return b"", None
        try:  # what has arrived, up to at_most (waiting only while nothing has)
            return await answer.handle.read(at_most), None
        except Exception as error:
            return b"", error

    @staticmethod
    async def arelease(body: Any) -> None:
        if body is None:
            return
        raw = getattr(body, "raw_stream", None)
        if raw is not None and hasattr(raw, "release"):
            raw.release()  # keeps the connection when the body was read to its end
        else:
            body.close()

    def classify(self, error: BaseException) -> Failure:
        return classify_s3(error, self.options)
