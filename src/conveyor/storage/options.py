"""How remote reads wait and retry: `RemoteOptions`, with defaults from environment variables.

One frozen object says how long a remote read may wait (to connect, and for the next bytes
of an answer), how often a failed request is tried again, how far ahead it reads and how
many requests hedging may add. The defaults aim at training jobs: a dead or hanging server
is reported within a minute (``retry_budget_s``), while an object store that restarts or
throttles for up to ~30 s is ridden out without a word.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

__all__ = ["ENV_PREFIX", "RemoteOptions"]

ENV_PREFIX = "CONVEYOR_REMOTE_"
"""``CONVEYOR_REMOTE_<FIELD NAME IN CAPITALS>`` overrides a default (e.g.
``CONVEYOR_REMOTE_READ_TIMEOUT_S=60``)."""


_WHOLE_NUMBERS = frozenset({"retries", "read_ahead", "read_ahead_max"})


@dataclass(frozen=True)
class RemoteOptions:
    """Timeouts and retries of remote (``http(s)://``, ``s3://``) reads.

    A request that fails with a timeout, a refused or reset connection, a body cut short, or
    HTTP 5xx / 408 / 429 is tried again after a backoff, from the byte offset reached; any
    other answer (404, 403, ...) is final at once. A request that completes its byte range
    resets the count of failures.
    """

    connect_timeout_s: float = 10.0
    """Longest wait for a TCP (and TLS) connection."""

    read_timeout_s: float = 20.0
    """Longest wait for the next bytes of an answer: the status line after a request is
    sent, or more of the body. A server that accepts and never answers fails after this."""

    retries: int = 8
    """Failed requests in a row that are tried again (0: fail at the first error). Throttling
    answers (429, ``SlowDown``) are not counted here: the budget bounds them."""

    backoff_s: float = 0.25
    """Wait before the first retry; doubled for each further one, with jitter (a random
    wait between half the value and the value)."""

    backoff_max_s: float = 8.0
    """Cap of one backoff wait."""

    retry_budget_s: float = 60.0
    """The longest a read waits once it stopped making progress: from the start (or the
    last byte) of the first failed request of a run of failures to the error, backoffs,
    ``Retry-After`` waits and the attempt in progress at the end included. A server that
    accepts and never answers, or stalls mid-body, is reported after this long."""

    read_ahead: int = 4
    """Blocks (of the reader's block size, 8 MiB for shards) requested ahead of the reading
    position of an ``http(s)://`` or ``s3://`` object, concurrently, plus the next shard's
    first window while the current one is read; 0 turns read-ahead off (one block at a
    time, and the next shard opened when it is needed). Memory: about ``read_ahead *
    block`` per open object, twice that with the next shard started."""

    read_ahead_max: int = 16
    """How far the window may grow (the memory bound: up to ``read_ahead_max * block`` per
    open object, 128 MiB for shards; at least ``read_ahead``). Within it the window holds
    what the reader consumes during a block's turnaround (its rate x the time from a
    request to the block's last byte: a long round trip for the link's bandwidth widens
    it), and doubles when the reader has to wait for a block already asked for, or when an
    object's first answer was late on a host not measured yet
    (`conveyor.storage.read_window`). On a fast link it stays near ``read_ahead``."""

    hedge_budget: float = 0.05
    """Requests that hedging may add, as a share of the requests sent (0 turns it off): a
    range whose first byte is later than the ``1 - hedge_budget / 2`` percentile of its
    peers' (97.5 for 5 %), or than 3 times their median if that is sooner, is asked for a
    second time, and the first answer wins (`conveyor.storage.hedging`)."""

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name in _WHOLE_NUMBERS:
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ValueError(
                        f"RemoteOptions: {field.name} must be an int >= 0, got {value!r}"
                    )
                continue
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"RemoteOptions: {field.name} must be a finite number >= 0, got {value!r}"
                )
        for name in ("connect_timeout_s", "read_timeout_s"):
            if getattr(self, name) == 0:
                raise ValueError(f"RemoteOptions: {name} must be > 0")
        if self.hedge_budget > 1:
            raise ValueError(
                f"RemoteOptions: hedge_budget is a share of requests (0 to 1), got "
                f"{self.hedge_budget!r}"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RemoteOptions:
        """The defaults, each overridden by ``CONVEYOR_REMOTE_<NAME>`` when that is set."""
        source = os.environ if environ is None else environ
        values: dict[str, float | int] = {}
        for field in fields(cls):
            text = source.get(ENV_PREFIX + field.name.upper())
            if text is None or not text.strip():
                continue
            try:
                whole = field.name in _WHOLE_NUMBERS
                values[field.name] = int(text) if whole else float(text)
            except ValueError:
                raise ValueError(
                    f"{ENV_PREFIX + field.name.upper()}={text!r} is not a "
                    f"{'whole ' if field.name in _WHOLE_NUMBERS else ''}number"
                ) from None
        return cls(**values)  # type: ignore[arg-type]

    @property
    def widest_read_ahead(self) -> int:
        """The most blocks a window may hold (``read_ahead_max``, never below ``read_ahead``)."""
        return max(self.read_ahead, self.read_ahead_max)

    def backoff_cap_s(self, retry: int) -> float:
        """The longest wait before retry number ``retry`` (0 for the first)."""
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** min(retry, 62))
