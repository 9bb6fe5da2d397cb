"""Retrying failed remote requests: what a failure was, and when (or whether) to try again.

A backend (HTTP, S3) turns each exception or error status into a `Failure`; a `RetryRun`
follows one run of failures of one object and either waits out a backoff or raises the
final error: `FileNotFoundError` for a real "not found" (404, NoSuchKey), else
`RemoteReadError` with the HTTP status, the URL, the byte offset and the attempts made.

A refused connection is retried only to a host that has answered in this process (a server
restarting); refused at the first contact, nothing is listening there, and waiting out the
retries (~20 s with the defaults) would only delay the error: it is raised at once.

A throttling answer (429, or 503 with ``Retry-After`` or S3's ``SlowDown``) is waited out
for the time the server asks (``Retry-After`` in seconds or as an HTTP date), plus a little
jitter so that many readers do not come back at once; throttles count against the retry
budget's time, not against ``retries`` (a busy store may throttle many times in a row).

The budget bounds the whole wait: a run of failures starts when the read stopped making
progress (the failed request's start, or its last byte), and the error comes at most
``retry_budget_s`` later, the attempt in progress then cut short (the caller asks
`RetryRun.remaining_s` for its deadline).
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from conveyor.storage.options import RemoteOptions
from conveyor.storage.redaction import redact_text, redact_url
from conveyor.storage.request_tally import count, request_counts

__all__ = [
    "Failure",
    "ObjectChangedError",
    "RemoteReadError",
    "RetryRun",
    "classify_failure",
    "failed_requests",
    "is_retryable_status",
    "retry_after_s",
]

_answered_hosts: set[str] = set()  # hosts that answered a request in this process
_THROTTLE_JITTER_S = 1.0  # at most this much is added to a server's Retry-After


def failed_requests() -> int:
    """Remote requests that failed in this process so far (each was retried or raised)."""
    return request_counts().failed


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date
    (``now``: the wall-clock time, default `time.time`); None when absent or unreadable."""
    if not value or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None  # an HTTP date is always GMT; a date without a zone is not one
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class RemoteReadError(OSError):
    """A remote read that failed for good; ``status`` is the HTTP status if there was one."""

    def __init__(
        self,
        message: str,
        url: str = "",
        status: int | None = None,
        offset: int | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.url = url
        self.status = status
        self.offset = offset
        self.attempts = attempts

    def __str__(self) -> str:
        return self.message

    def __reduce__(
        self,
    ) -> tuple[type[RemoteReadError], tuple[str, str, int | None, int | None, int]]:
        return (type(self), (self.message, self.url, self.status, self.offset, self.attempts))


class ObjectChangedError(RemoteReadError):
    """The object was replaced while it was read (another ETag, size or modification time,
    or HTTP 412 to ``If-Match``): final, since its bytes so far belong to another version."""


def is_retryable_status(status: int) -> bool:
    """5xx, 408 (request timeout) and 429 (too many requests) are worth another try."""
    return status >= 500 or status in (408, 429)


@dataclass(frozen=True)
class Failure:
    """One failed request, as classified by a backend.

    ``reason`` is short and says what happened (``"HTTP 500 Internal Server Error"``,
    ``"connection refused"``, ``"no data for 20 s"``); ``missing`` marks a real
    "not found", which is final and becomes `FileNotFoundError`; ``refused``, a connection
    refused (retried only to a host that answered before); ``throttled``, an answer asking
    to slow down, waited out ``retry_after`` seconds when the server said how long.
    """

    reason: str
    retryable: bool
    status: int | None = None
    missing: bool = False
    refused: bool = False
    changed: bool = False
    throttled: bool = False
    retry_after: float | None = None


def classify_failure(error: BaseException, classify: Callable[[BaseException], Failure]) -> Failure:
    """``classify(error)`` (the backend's rules), except for `ObjectChangedError`, which a
    reader raised itself on comparing an answer with the first one: final."""
    if isinstance(error, ObjectChangedError):
        return Failure(error.message, retryable=False, status=error.status, changed=True)
    return classify(error)


def classify_builtin(error: BaseException, read_timeout_s: float) -> Failure | None:
    """Standard-library exceptions every backend may see; None for anything else."""
    if isinstance(error, FileNotFoundError):
        return Failure(f"not found: {error}", retryable=False, missing=True)
    if isinstance(error, TimeoutError):  # asyncio.TimeoutError is TimeoutError on 3.11
        return Failure(f"no data for {read_timeout_s:g} s (timed out)", retryable=True)
    if isinstance(error, ConnectionRefusedError):
        return Failure("connection refused", retryable=True, refused=True)
    if isinstance(error, ConnectionResetError):
        return Failure("connection reset by peer", retryable=True)
    if isinstance(error, ConnectionError | EOFError):
        return Failure(f"connection lost: {type(error).__name__}: {error}", retryable=True)
    if isinstance(error, PermissionError):
        return Failure(f"permission denied: {error}", retryable=False)
    if isinstance(error, OSError):
        return Failure(f"{type(error).__name__}: {error}", retryable=True)
    return None


class RetryRun:
    """Failures of one range's requests; a completed request ends the run (``reset``).

    ``delay_after`` returns how long to wait before the next attempt, or raises the final
    error: after ``retries`` failures in a row (throttles not counted), or when the wait
    would end past the budget, ``retry_budget_s`` after the run began. Jitter comes from
    a private `random.Random`, never the global one (which the user's seeding owns).
    """

    def __init__(
        self,
        options: RemoteOptions,
        url: str,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.options = options
        self.url = url
        self._host = urlsplit(url).netloc.rpartition("@")[2]  # no user:password in messages
        self._clock = clock
        self._sleep = sleep
        self._random = random.Random()
        self.failures = 0  # in this run, throttles included
        self._counted = 0  # in this run, throttles not included (bounded by ``retries``)
        self.total_failures = 0
        self._began_at = 0.0
        self.deadline: float | None = None

    def reset(self) -> None:
        """A request succeeded: the next failure starts a new run."""
        self.failures = self._counted = 0
        self.deadline = None
        _answered_hosts.add(self._host)

    def postpone(self, seconds: float) -> None:
        """Move the budget's end by ``seconds`` spent waiting for a turn (the host's
        limit or pace, this process's own doing): only the store's failures spend it."""
        if self.deadline is not None and seconds > 0:
            self.deadline += seconds

    def remaining_s(self) -> float | None:
        """Seconds left before the budget of the current run ends (None: no failure yet)."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - self._clock())

    def failed(self, failure: Failure, offset: int | None) -> None:
        """Wait before the next attempt, or raise the final error for ``failure``
        (``offset``: the byte the failed request started at, None for a listing)."""
        self._sleep(self.delay_after(failure, offset))

    def delay_after(
        self, failure: Failure, offset: int | None, stalled_since: float | None = None
    ) -> float:
        """How long to wait before the next attempt (for callers that wait themselves, on
        an event loop), or the final error for ``failure``, raised. ``stalled_since``: when
        the failed request last made progress (its start, or its last byte; default now)."""
        count("failed")
        if failure.throttled:
            count("throttled")
        now = self._clock()
        if self.failures == 0:
            self._began_at = now if stalled_since is None else min(stalled_since, now)
            self.deadline = self._began_at + self.options.retry_budget_s
        self.failures += 1
        self._counted += not failure.throttled
        self.total_failures += 1
        where = self._where(offset)
        reason = redact_text(failure.reason)  # a client library's words may quote the URL
        # ``from None``: the client's exception (being handled by the caller, maybe) would be
        # printed with the traceback, and its words may quote the URL unredacted
        if failure.missing:
            raise FileNotFoundError(f"{where}: {reason}") from None
        if failure.status is not None:
            _answered_hosts.add(self._host)  # an HTTP status: the host is there
        if failure.refused and self._host not in _answered_hosts:
            raise RemoteReadError(
                f"{reason} reading {where}: nothing is listening at {self._host} "
                "(a refused first connection is not retried; once the host has answered, "
                "refusals are retried as a restarting server's)",
                self.url,
                None,
                offset,
            ) from None
        if not failure.retryable:
            final = ObjectChangedError if failure.changed else RemoteReadError
            raise final(f"{reason} reading {where}", self.url, failure.status, offset) from None
        delay = self._delay(failure)
        assert self.deadline is not None
        if self._counted > self.options.retries or now + delay > self.deadline:
            if failure.retry_after is not None and now + delay > self.deadline:
                reason += f" (the server asked to wait {failure.retry_after:.3g} s)"
            raise self.gave_up(reason, offset, failure.status)
        return delay

    def _delay(self, failure: Failure) -> float:
        if failure.retry_after is not None:  # the time asked, and a little more
            jitter = min(_THROTTLE_JITTER_S, 0.05 + 0.2 * failure.retry_after)
            return failure.retry_after + self._random.uniform(0.0, jitter)
        return self._random.uniform(0.5, 1.0) * self.options.backoff_cap_s(self.failures - 1)

    def out_of_time(self, offset: int | None) -> RemoteReadError:
        """The attempt in progress was cut at the budget's end: the final error (counted
        as one more failed attempt)."""
        count("failed")
        self.failures += 1
        self.total_failures += 1
        reason = f"no answer within the retry budget ({self.options.retry_budget_s:g} s)"
        return self.gave_up(reason, offset, None)

    def gave_up(self, reason: str, offset: int | None, status: int | None) -> RemoteReadError:
        """The error for a run that is over: what failed last, where, after how many
        attempts in how long, and the options that bounded it."""
        options = self.options
        spent = self._clock() - self._began_at
        return RemoteReadError(
            f"{reason} reading {self._where(offset)}; gave up after {self.failures} failed "
            f"attempt(s) in {spent:.1f} s (RemoteOptions(retries={options.retries}, "
            f"retry_budget_s={options.retry_budget_s:g}, "
            f"read_timeout_s={options.read_timeout_s:g}))",
            self.url,
            status,
            offset,
            self.failures,
        )

    def _where(self, offset: int | None) -> str:
        shown = redact_url(self.url)
        return shown if offset is None else f"{shown} at byte {offset}"
