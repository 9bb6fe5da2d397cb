"""Bad data: errors that name the shard and sample, and the raise-or-skip policy.

Every failure on a shard or sample (missing file, corrupt tar header, truncated member,
undecodable image, a remote read that failed for good) becomes a `SampleError` carrying the
shard URL, the sample key and, where known, the byte offset and the samples it cost (a
`Loss`). An `ErrorPolicy` decides what happens to it: ``"raise"`` (the default) raises it;
``"skip"`` records it and carries on, within an optional budget (``max_skips``,
``max_rate``, both in samples lost), and a `BadSampleWarning` summarises the skips when the
stream ends. Nothing is dropped without being counted: each skip is a `SkipRecord` (shard,
keys, samples lost, reason) in the policy and in this process's `SkipSink`, which a
loader's engine drains to count skips in the main process.

A policy object is shared by every node it is passed to, so its counters add up over one
pipeline; in process workers each worker counts for itself (and the engine adds up).
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Literal

from conveyor.formats.loss_estimates import Loss, ShardHistory
from conveyor.formats.skips import SkipRecord, skip_sink

__all__ = [
    "BadSampleWarning",
    "ErrorPolicy",
    "SampleError",
    "SkippedSample",
    "TooManyBadSamples",
    "as_policy",
]

OnError = Literal["raise", "skip"]


class SampleError(RuntimeError):
    """A bad shard or sample; ``url``, ``key`` and ``offset`` say where (empty if unknown),
    ``loss`` what it cost (None: one sample if ``key`` is set, else unknown)."""

    def __init__(
        self,
        reason: str,
        url: str = "",
        key: str = "",
        offset: int | None = None,
        loss: Loss | None = None,
    ):
        # on the error path only: `import conveyor` (which needs this class) stays off storage
        from conveyor.storage.redaction import redact_text, redact_url

        reason = redact_text(reason)  # it may quote a client library's error, URL and all
        where = [f"shard {redact_url(url)!r}" if url else "", f"sample {key!r}" if key else ""]
        if offset is not None:
            where.append(f"offset {offset}")
        located = ", ".join(part for part in where if part)
        super().__init__(f"{reason} ({located})" if located else reason)
        self.reason = reason
        self.url = url
        self.key = key
        self.offset = offset
        self.loss = loss

    def __reduce__(
        self,
    ) -> tuple[type[SampleError], tuple[str, str, str, int | None, Loss | None]]:
        return (type(self), (self.reason, self.url, self.key, self.offset, self.loss))


class TooManyBadSamples(SampleError):
    """Raised by a ``"skip"`` policy when its budget (count or rate) is used up."""


class BadSampleWarning(UserWarning):
    """Summary of the samples a ``"skip"`` policy dropped in one stream."""


SkippedSample = SkipRecord
"""The older name of `SkipRecord` (``url``, ``key``, ``reason`` still read the same)."""


class ErrorPolicy:
    """Raise on bad data (``"raise"``) or skip, count and report it (``"skip"``).

    Args:
        on_error: ``"raise"`` or ``"skip"``.
        max_skips: with ``"skip"``, raise `TooManyBadSamples` once more than this many
            samples were lost (None: no limit).
        max_rate: with ``"skip"``, raise once lost / (lost + delivered) exceeds this
            fraction, checked after ``min_seen`` samples (None: no limit).
        min_seen: samples to see before ``max_rate`` applies.
        keep: how many `SkipRecord` examples to keep in ``examples``.

    ``skipped`` counts samples lost (``estimated`` of them estimated), ``records`` the
    skips. A shard cut short by a skipped shard-level error (corrupt header, truncated
    member, broken connection) is recorded in ``cut_short``: the grouping stage then drops
    that shard's last, possibly incomplete, sample, already counted in the same record.
    A sample that lost one member (a tar member over ``max_member_bytes``) is named in
    ``dropped`` as ``(url, key)``: the grouping stage drops the rest of it.
    ``history`` holds what the shards read to their end looked like (for estimates).

    Read ``skipped``, ``delivered``, ``reasons`` and ``examples`` at any time; ``report()``
    renders them. Not thread-safe (one pipeline per policy per thread).
    """

    def __init__(
        self,
        on_error: OnError = "raise",
        *,
        max_skips: int | None = None,
        max_rate: float | None = None,
        min_seen: int = 100,
        keep: int = 10,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if max_rate is not None and not 0 <= max_rate <= 1:
            raise ValueError(f"max_rate must be within [0, 1], got {max_rate}")
        if max_skips is not None and max_skips < 0:
            raise ValueError(f"max_skips must be >= 0, got {max_skips}")
        self.on_error: OnError = on_error
        self.max_skips = max_skips
        self.max_rate = max_rate
        self.min_seen = min_seen
        self.keep = keep
        self.skipped = 0
        self.estimated = 0
        self.records = 0
        self.reasons: Counter[str] = Counter()
        self.examples: list[SkipRecord] = []
        self.cut_short: set[str] = set()
        self.dropped: set[tuple[str, str]] = set()
        self.history = ShardHistory()
        self.deferred: SampleError | None = None
        self._delivered: dict[str, int] = {}
        self._reported = 0
        self._unforwarded = 0  # skips made while no engine drained this process's sink

    def __repr__(self) -> str:
        return f"ErrorPolicy({self.on_error!r}, skipped={self.skipped})"

    @property
    def delivered(self) -> int:
        """Good samples delivered (as counted by the grouping and decoding stages)."""
        return max(self._delivered.values(), default=0)

    def passed(self, who: str) -> None:
        """Count one good sample delivered by stage ``who`` (the denominator of ``max_rate``)."""
        self._delivered[who] = self._delivered.get(who, 0) + 1

    def loss_of(self, error: SampleError) -> Loss:
        """What ``error`` cost: its own `Loss`, one sample for a keyed error, else a whole
        shard as estimated from ``history`` (at least one sample)."""
        if error.loss is not None:
            return error.loss
        if error.key:
            return Loss(1, (error.key,))
        whole = self.history.estimate_rest(0, None, None)
        return Loss(max(1, whole or 0), (), estimated=True)

    def handle(self, error: SampleError) -> None:
        """Raise ``error`` (policy ``"raise"`` or budget exceeded) or record it as skipped."""
        if self.on_error == "raise":
            raise error
        from conveyor.storage.redaction import redact_url

        loss = self.loss_of(error)
        at = f" at byte {error.offset}" if error.offset is not None else ""
        record = SkipRecord(
            redact_url(error.url), error.reason + at, loss.samples, loss.keys, loss.estimated
        )
        if not skip_sink().add(record):
            self._unforwarded += 1
        self.skipped += loss.samples
        self.estimated += loss.samples if loss.estimated else 0
        self.records += 1
        if not error.key:  # a shard-level failure: the shard's sample in progress is suspect
            self.cut_short.add(error.url)
        self.reasons[error.reason.split(":", 1)[0]] += 1
        if len(self.examples) < self.keep:
            self.examples.append(record)
        self._check_budget(error)

    def _check_budget(self, error: SampleError) -> None:
        if self.max_skips is not None and self.skipped > self.max_skips:
            raise TooManyBadSamples(
                f"more than max_skips={self.max_skips} bad samples ({self.skipped} lost); "
                f"last: {error.reason}",
                error.url,
                error.key,
                error.offset,
            ) from error
        seen = self.skipped + self.delivered
        rate = self.max_rate
        if rate is not None and seen >= self.min_seen and self.skipped / seen > rate:
            raise TooManyBadSamples(
                f"{self.skipped} of {seen} samples were bad, above max_rate={rate}; "
                f"last: {error.reason}",
                error.url,
                error.key,
                error.offset,
            ) from error

    def report(self) -> str:
        """A one-paragraph summary: samples lost, by reason, and a few skips in detail."""
        if not self.skipped and not self.records:
            return "no bad samples"
        reasons = ", ".join(f"{count} x {reason}" for reason, count in self.reasons.most_common())
        estimated = f", {self.estimated} of them estimated" if self.estimated else ""
        shown = "; ".join(record.describe() for record in self.examples[:3])
        return (
            f"skipped {self.skipped} bad sample(s){estimated} in {self.records} skip(s) "
            f"({reasons}); e.g. {shown}"
        )

    def end_of_stream(self) -> None:
        """Warn once about skips not yet reported (called by nodes when a stream ends),
        unless an engine forwards this process's skips to its main process, or the stream
        ended early for an error about to be raised (``deferred``)."""
        if self.records > self._reported and self.deferred is None:
            self._reported = self.records
            if self._unforwarded or not skip_sink().is_forwarding():
                self._unforwarded = 0  # no engine reports those: this warning does
                warnings.warn(self.report(), BadSampleWarning, stacklevel=3)


def as_policy(on_error: OnError | ErrorPolicy) -> ErrorPolicy:
    """``on_error`` itself if it is a policy, else a new policy of that kind."""
    if isinstance(on_error, ErrorPolicy):
        return on_error
    return ErrorPolicy(on_error)
