"""One pass over one shard: which samples it has read, and what a failure in it cost.

`ShardProgress` follows the members a tar reader yields (grouped by WebDataset keys, as
`conveyor.formats.grouping` groups them) so that, when the shard fails, the loss can be
given in samples: the sample in progress (its key is known; the grouping stage drops it,
it may be incomplete) plus the samples after it, counted exactly when `scan_rest` could
read them, else estimated from the bytes left or from the shards read before.
"""

from __future__ import annotations

from conveyor.formats.grouping import split_name
from conveyor.formats.loss_estimates import Loss, ShardHistory
from conveyor.formats.tar import ScanResult, TarMember

__all__ = ["ShardProgress", "keys_of"]


def keys_of(names: list[str]) -> list[str]:
    """The sample keys of consecutive member names, each sample once."""
    keys: list[str] = []
    for name in names:
        parts = split_name(name)
        if parts is not None and (not keys or keys[-1] != parts[0]):
            keys.append(parts[0])
    return keys


class ShardProgress:
    """Samples read so far in one pass over shard ``url`` that started at byte ``start``."""

    def __init__(self, url: str, start: int, history: ShardHistory) -> None:
        self.url = url
        self.start = start
        self.history = history
        self.complete = 0  # samples before the one in progress
        self.current: str | None = None  # key of the sample in progress
        self.current_offset = start  # where the sample in progress starts
        self.position = start  # where the next member starts

    def saw(self, member: TarMember) -> None:
        """Count ``member`` (yielded by the tar reader)."""
        parts = split_name(member.name)
        if parts is not None and parts[0] != self.current:
            if self.current is not None:
                self.complete += 1
            self.current = parts[0]
            self.current_offset = member.offset
        self.position = member.end

    def finished(self, size: int | None) -> None:
        """The shard ended cleanly: remember its shape for later estimates (whole passes
        only: a resumed pass saw part of the shard)."""
        if self.start == 0:
            seen = self.complete + (self.current is not None)
            self.history.finished(seen, self.position, size)

    def completes_current(self, failed_key: str) -> bool:
        """True when a failure in a member of sample ``failed_key`` (known from a readable
        header) shows that the sample in progress had ended: its key differs."""
        return bool(failed_key) and self.current is not None and failed_key != self.current

    def _first_lost(self, failed_key: str) -> list[str]:
        if self.completes_current(failed_key):
            return [failed_key]
        if self.current is not None:
            return [self.current]
        return [failed_key] if failed_key else []

    def loss_scanned(self, scan: ScanResult) -> Loss:
        """The loss after a corrupt header, from the members `scan_rest` found after it."""
        keys = self._first_lost("")
        keys += [key for key in keys_of(scan.names) if not keys or key != keys[-1]]
        return Loss(max(1, len(keys)), tuple(keys), estimated=not scan.clean)

    def loss_estimated(self, bytes_left: int | None, failed_key: str = "") -> Loss:
        """The loss when the rest of the shard cannot be read: the sample that failed (or
        the one in progress) plus an estimate of the rest (from ``bytes_left`` if given,
        else from the shards read before; at least one sample in all)."""
        keys = self._first_lost(failed_key)
        complete = self.complete + self.completes_current(failed_key)
        done = self.position - self.start if self.completes_current(failed_key) else 0
        done = done or self.current_offset - self.start
        per_sample = done / complete if complete and done > 0 else None
        rest = self.history.estimate_rest(complete + len(keys), per_sample, bytes_left)
        return Loss(max(1, len(keys) + (rest or 0)), tuple(keys), estimated=True)
