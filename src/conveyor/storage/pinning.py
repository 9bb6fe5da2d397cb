"""One version of a remote object per read: the first answer pins it, later ranges must agree.

A shard is read as many ranged requests (blocks, retries, read-ahead windows). If the object
is replaced on the server between two of them, the reader would splice two versions: the
first samples of the old shard and the rest of the new one, with nobody told. So the first
answer's facts pin the object: its ETag (sent back as ``If-Match`` when it is a strong one,
so a server that honours it answers 412), its size and its ``Last-Modified``. Every later
answer is compared with them too (servers and proxies that ignore ``If-Match`` exist); a
difference is `ObjectChangedError`, final, before any byte of that answer is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from conveyor.storage.retry import ObjectChangedError

if TYPE_CHECKING:
    from conveyor.storage.answers import Answer

__all__ = ["ObjectFacts"]


@dataclass
class ObjectFacts:
    """What the first answer said about the object; shared by all its ranges."""

    size: int | None = None
    etag: str | None = None
    modified: str | None = None

    def if_match(self) -> str | None:
        """The ETag to send as ``If-Match``: a strong one only (a weak ``W/"..."`` ETag
        never matches under ``If-Match``'s strong comparison; it is compared here)."""
        if self.etag is None or self.etag.startswith("W/"):
            return None
        return self.etag

    def admit(self, answer: Answer) -> None:
        """Learn the object's facts from its first answer; raise `ObjectChangedError` when
        a later answer comes from another version (other ETag, size or modification time)."""
        changed = self._differences(answer)
        if changed:
            raise ObjectChangedError(
                "the object changed while it was read (" + ", ".join(changed) + ")"
            )
        if answer.handle is not None or self.size is None:
            self.size = answer.total if answer.total is not None else self.size
        self.etag = self.etag or answer.etag
        self.modified = self.modified or answer.modified

    def _differences(self, answer: Answer) -> list[str]:
        changed = []
        if self.etag and answer.etag and answer.etag != self.etag:
            changed.append(f"ETag {self.etag} at first, now {answer.etag}")
        if self.modified and answer.modified and answer.modified != self.modified:
            changed.append(f"Last-Modified {self.modified!r} at first, now {answer.modified!r}")
        size, total = self.size, answer.total
        # a range past the end (no handle) names a size only as far as it knows
        sized = answer.handle is not None or (size is not None and answer.start < size)
        if size is not None and total is not None and total != size and sized:
            changed.append(f"{size} bytes at first, now {total}")
        return changed
