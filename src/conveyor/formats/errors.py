"""Bad data: errors that name the shard and sample, and the raise-or-skip policy.

Every failure on a shard or sample (missing file, corrupt tar header, truncated member,
undecodable image) becomes a `SampleError` carrying the shard URL, the sample key and,
where known, the byte offset. An `ErrorPolicy` decides what happens to it: ``"raise"``
(the default) raises it; ``"skip"`` counts it and carries on, within an optional budget
(``max_skips``, ``max_rate``), and a `BadSampleWarning` summarises the skips when the
stream ends. Nothing is dropped without being counted.

A policy object is shared by every node it is passed to, so its counters add up over one
pipeline; in process workers each worker counts (and warns) for itself.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Literal

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
    """A bad shard or sample; ``url``, ``key`` and ``offset`` say where (empty if unknown)."""

    def __init__(self, reason: str, url: str = "", key: str = "", offset: int | None = None):
        where = [f"shard {url!r}" if url else "", f"sample {key!r}" if key else ""]
        if offset is not None:
            where.append(f"offset {offset}")
        located = ", ".join(part for part in where if part)
        super().__init__(f"{reason} ({located})" if located else reason)
        self.reason = reason
        self.url = url
        self.key = key
        self.offset = offset

    def __reduce__(self) -> tuple[type[SampleError], tuple[str, str, str, int | None]]:
        return (type(self), (self.reason, self.url, self.key, self.offset))


class TooManyBadSamples(SampleError):
    """Raised by a ``"skip"`` policy when its budget (count or rate) is used up."""


class BadSampleWarning(UserWarning):
    """Summary of the samples a ``"skip"`` policy dropped in one stream."""


@dataclass(frozen=True)
class SkippedSample:
    """One skipped item, as recorded by `ErrorPolicy`."""

    url: str
    key: str
    reason: str


class ErrorPolicy:
    """Raise on bad data (``"raise"``) or skip, count and report it (``"skip"``).

    Args:
        on_error: ``"raise"`` or ``"skip"``.
        max_skips: with ``"skip"``, raise `TooManyBadSamples` once more than this many
            items were skipped (None: no limit).
        max_rate: with ``"skip"``, raise once skipped / (skipped + delivered) exceeds this
            fraction, checked after ``min_seen`` items (None: no limit).
        min_seen: items to see before ``max_rate`` applies.
        keep: how many `SkippedSample` examples to keep in ``examples``.

    A shard cut short by a skipped shard-level error (corrupt header, truncated member,
    broken connection) is recorded in ``cut_short``: the grouping stage then drops that
    shard's last, possibly incomplete, sample as part of the same skip.

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
        self.reasons: Counter[str] = Counter()
        self.examples: list[SkippedSample] = []
        self.cut_short: set[str] = set()
        self._delivered: dict[str, int] = {}
        self._reported = 0

    def __repr__(self) -> str:
        return f"ErrorPolicy({self.on_error!r}, skipped={self.skipped})"

    @property
    def delivered(self) -> int:
        """Good samples delivered (as counted by the grouping and decoding stages)."""
        return max(self._delivered.values(), default=0)

    def passed(self, who: str) -> None:
        """Count one good sample delivered by stage ``who`` (the denominator of ``max_rate``)."""
        self._delivered[who] = self._delivered.get(who, 0) + 1

    def handle(self, error: SampleError) -> None:
        """Raise ``error`` (policy ``"raise"`` or budget exceeded) or record it as skipped."""
        if self.on_error == "raise":
            raise error
        self.skipped += 1
        if not error.key:  # a shard-level failure: the shard's sample in progress is suspect
            self.cut_short.add(error.url)
        self.reasons[error.reason.split(":", 1)[0]] += 1
        if len(self.examples) < self.keep:
            self.examples.append(SkippedSample(error.url, error.key, str(error)))
        if self.max_skips is not None and self.skipped > self.max_skips:
            raise TooManyBadSamples(
                f"more than max_skips={self.max_skips} bad samples; last: {error.reason}",
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
        """A one-paragraph summary: counts by reason and a few examples."""
        if not self.skipped:
            return "no bad samples"
        reasons = ", ".join(f"{count} x {reason}" for reason, count in self.reasons.most_common())
        shown = "; ".join(str(example.reason) for example in self.examples[:3])
        return f"skipped {self.skipped} bad sample(s) ({reasons}); e.g. {shown}"

    def end_of_stream(self) -> None:
        """Warn once about skips not yet reported (called by nodes when a stream ends)."""
        if self.skipped > self._reported:
            self._reported = self.skipped
            warnings.warn(self.report(), BadSampleWarning, stacklevel=3)


def as_policy(on_error: OnError | ErrorPolicy) -> ErrorPolicy:
    """``on_error`` itself if it is a policy, else a new policy of that kind."""
    if isinstance(on_error, ErrorPolicy):
        return on_error
    return ErrorPolicy(on_error)
