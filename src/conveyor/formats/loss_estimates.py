"""What a failure in a shard cost, in samples: `Loss`, and the `ShardHistory` estimates
are made from (the rest of a shard whose server died, a cut shard).

Kept apart from `conveyor.formats.skips`, which every worker imports: only tar-shard
pipelines need these.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Loss", "ShardHistory"]


class Loss(NamedTuple):
    """How many samples one failure cost, which keys (when known), and whether the count
    is an estimate."""

    samples: int
    keys: tuple[str, ...] = ()
    estimated: bool = False


class ShardHistory:
    """Shards read to their end so far: the basis for estimating what a failure cost."""

    def __init__(self) -> None:
        self.shards = 0
        self.samples = 0
        self.sample_bytes = 0
        self.tail_bytes: list[int] = []

    def __repr__(self) -> str:
        return f"ShardHistory(shards={self.shards}, samples={self.samples})"

    def finished(self, samples: int, end_offset: int, size: int | None) -> None:
        """A shard ended cleanly after ``samples`` samples; its end-of-archive blocks start
        at ``end_offset`` of ``size`` bytes."""
        self.shards += 1
        self.samples += samples
        self.sample_bytes += end_offset
        if size is not None and len(self.tail_bytes) < 64:
            self.tail_bytes.append(max(0, size - end_offset))

    def per_shard(self) -> float | None:
        """Mean samples per finished shard (None before the first)."""
        return self.samples / self.shards if self.shards else None

    def tail(self) -> int:
        """Typical end padding of a shard (tar writes 2 zero blocks, often padded more)."""
        if not self.tail_bytes:
            return 1024
        return sorted(self.tail_bytes)[len(self.tail_bytes) // 2]

    def estimate_rest(
        self, samples_seen: int, bytes_per_sample: float | None, bytes_left: int | None
    ) -> int | None:
        """Samples in the unread rest of a shard of which ``samples_seen`` were seen: from
        ``bytes_left`` at ``bytes_per_sample`` (else the mean of finished shards), or when
        the bytes say nothing (None), from the mean samples per shard; None if unknown."""
        per_sample = bytes_per_sample
        if not per_sample and self.samples:
            per_sample = self.sample_bytes / self.samples
        if bytes_left is not None and per_sample:
            return max(0, round((bytes_left - self.tail()) / per_sample))
        per_shard = self.per_shard()
        if per_shard is not None:
            return max(0, round(per_shard) - samples_seen)
        return None
