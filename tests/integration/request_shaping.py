"""What the latency proxy does to whole HTTP requests: throttling, a heavy tail, a log.

Used by ``latency_proxy.py`` (and so by the tests and ``benchmarks/s7_object_store.py``).
A request is recognised by its first bytes from the client (``GET ``, ``HEAD `` ...): the
clients in question (aiohttp, botocore, curl) send one request per connection at a time
and wait for its answer, and a request's header block arrives in one read on 127.0.0.1.

- **Throttling** (``requests_per_s``): a token bucket shared by every connection admits
  that many requests a second (bursts of ``burst_requests``, one second's worth by
  default); a request over the rate is
  not forwarded but answered by the proxy itself, ``429 Too Many Requests`` or S3's
  ``503 SlowDown`` (an XML error body botocore understands), with ``Retry-After`` in
  seconds, as an HTTP date, or absent.
- **Heavy tail** (``slow_fraction``): that share of requests, drawn with a seeded RNG,
  reaches the server ``slow_s`` late (a slow disk, a busy front end), so its answer's first
  byte comes that much later than the others'.
- **Log** (``log``): one JSON line per request: time, method, target, what was done.
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import time
from dataclasses import dataclass
from typing import IO

__all__ = ["RequestRules", "Verdict", "throttle_answer"]

METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ")
SLOW_DOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><Resource>/</Resource>"
    b"<RequestId>proxy</RequestId></Error>"
)


@dataclass(frozen=True)
class Verdict:
    """What happens to one request: answered by the proxy (``answer``), or forwarded
    ``extra_delay_s`` late."""

    answer: bytes | None = None
    extra_delay_s: float = 0.0


def throttle_answer(status: int, retry_after: str | None) -> bytes:
    """The bytes of a throttling answer: 429, or 503 with S3's ``SlowDown`` error."""
    reason = "Too Many Requests" if status == 429 else "Slow Down"
    body = SLOW_DOWN_BODY if status == 503 else b"too many requests\n"
    kind = "application/xml" if status == 503 else "text/plain"
    head = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {kind}"]
    head.append(f"Content-Length: {len(body)}")
    if retry_after is not None:
        head.append(f"Retry-After: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class RequestRules:
    """The per-request rules of one proxy (shared by all its connections).

    ``retry_after``: ``"seconds"``, ``"date"`` or ``"none"``; ``retry_after_s`` the wait
    it asks for (whole seconds, as HTTP has them)."""

    def __init__(
        self,
        requests_per_s: float | None = None,
        burst_requests: float | None = None,
        throttle_status: int = 429,
        retry_after: str = "seconds",
        retry_after_s: int = 1,
        slow_fraction: float = 0.0,
        slow_s: float = 0.0,
        seed: int = 0,
        log: IO[str] | None = None,
    ) -> None:
        self.rate = requests_per_s
        # a bucket of one second's requests by default (a store's rate over a second)
        self.burst = burst_requests if burst_requests is not None else max(1.0, self.rate or 0)
        self.tokens = self.burst
        self.filled_at = time.monotonic()
        self.status = throttle_status
        self.retry_after = retry_after
        self.retry_after_s = retry_after_s
        self.slow_fraction = slow_fraction
        self.slow_s = slow_s
        self.random = random.Random(seed)
        self.log = log

    @property
    def active(self) -> bool:
        return bool(self.rate or self.slow_fraction or self.log)

    def judge(self, chunk: bytes) -> Verdict | None:
        """None when ``chunk`` does not start a request (a body, or more of one)."""
        if not chunk.startswith(METHODS):
            return None
        line = chunk.split(b"\r\n", 1)[0].decode("latin-1")
        method, _, rest = line.partition(" ")
        target = rest.rpartition(" ")[0] or rest
        verdict = Verdict()
        if self.rate and method in ("GET", "HEAD") and not self._admit():
            verdict = Verdict(answer=throttle_answer(self.status, self._retry_after()))
        elif self.slow_fraction and self.random.random() < self.slow_fraction:
            verdict = Verdict(extra_delay_s=self.slow_s)
        if self.log is not None:
            done = "throttled" if verdict.answer else "slow" if verdict.extra_delay_s else "sent"
            record = {"t": time.time(), "method": method, "target": target, "done": done}
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()
        return verdict

    def _admit(self) -> bool:
        assert self.rate is not None
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.filled_at) * self.rate)
        self.filled_at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def _retry_after(self) -> str | None:
        if self.retry_after == "none":
            return None
        if self.retry_after == "date":
            # an HTTP date has whole seconds: ask for the next whole second after the wait
            return email.utils.formatdate(math.ceil(time.time()) + self.retry_after_s, usegmt=True)
        return str(self.retry_after_s)
