"""WebDataset sample layout: consecutive files sharing a basename form one sample.

Rules (those of the WebDataset library, so its shards read the same here):
- a member ``dir/000123.seg.png`` has key ``dir/000123`` (the path up to the first dot
  of the basename) and extension ``seg.png`` (the rest, lower-cased);
- a basename without a dot, or starting with one, has no key and is ignored, as are
  top-level ``__name__`` metadata files;
- consecutive members with the same key (and shard) form one sample
  ``{"__key__": key, "__url__": url, ext: value, ...}``; a key seen again later starts a
  new sample; the same extension twice in one sample is an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from conveyor.formats.errors import SampleError

__all__ = ["SampleBuilder", "group_samples", "split_name"]

Sample = dict[str, Any]


def split_name(name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a member name, or None when it names no sample part."""
    slash = name.rfind("/")
    base = name[slash + 1 :]
    if slash < 0 and base.startswith("__") and base.endswith("__"):
        return None
    dot = base.find(".")
    if dot <= 0:
        return None
    return name[: slash + 1 + dot], base[dot + 1 :].lower()


class SampleBuilder:
    """Accumulates members into samples; ``add`` returns each sample once it is complete."""

    def __init__(self) -> None:
        self.current: Sample | None = None

    def add(self, url: str, name: str, value: Any) -> Sample | None:
        """Add one member; returns the previous sample if this member starts a new one.

        Raises `SampleError` for a repeated extension (the partial sample is dropped).
        """
        parts = split_name(name)
        if parts is None:
            return None
        key, ext = parts
        current = self.current
        finished = None
        if current is None or current["__key__"] != key or current["__url__"] != url:
            finished = current
            current = self.current = {"__key__": key, "__url__": url}
        if ext in current:
            self.current = None
            raise SampleError(f"duplicate file {ext!r} in one sample", url, key)
        current[ext] = value
        return finished

    def flush(self) -> Sample | None:
        """The sample in progress (at the end of the stream), if any."""
        current, self.current = self.current, None
        return current


def group_samples(members: Iterable[tuple[str, str, Any]]) -> Iterator[Sample]:
    """Group ``(url, member_name, value)`` triples into WebDataset samples."""
    builder = SampleBuilder()
    for url, name, value in members:
        finished = builder.add(url, name, value)
        if finished is not None:
            yield finished
    last = builder.flush()
    if last is not None:
        yield last
