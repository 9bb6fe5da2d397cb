"""Reading shards outside any pipeline: a chain of small generators, and a shard summary.

``iter_samples(url)`` = open (streaming) -> `read_members` -> `group_samples` -> decode.
The DataPipe nodes (``load_from_tar``, ``webdataset``, ``decode``) do the same steps one
pull at a time, with checkpointable state; this is the plain form for tools and scripts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from conveyor.formats.decoders import DecoderRegistry
from conveyor.formats.errors import SampleError
from conveyor.formats.grouping import group_samples, split_name
from conveyor.formats.tar import open_archive, read_members
from conveyor.storage import open_url
from conveyor.storage.redaction import redact_url

__all__ = ["ShardSummary", "iter_members", "iter_samples", "summarize_shard"]


def iter_members(
    url: str, storage_options: Mapping[str, Any] | None = None, start: int = 0
) -> Iterator[tuple[str, str, bytes]]:
    """``(url, member name, bytes)`` for every file of the archive at ``url``."""
    with open_url(url, storage_options) as raw:
        stream = open_archive(raw, url)
        for member in read_members(stream, url, start):
            if member.refused:
                raise SampleError(member.refused, url, offset=member.offset)
            yield url, member.name, member.data


def iter_samples(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    decoders: DecoderRegistry | None = None,
) -> Iterator[dict[str, Any]]:
    """WebDataset samples of one shard, decoded by ``decoders`` (raw bytes if None)."""
    for sample in group_samples(iter_members(url, storage_options)):
        yield sample if decoders is None else decoders.decode_sample(sample)


@dataclass
class ShardSummary:
    """What `summarize_shard` found: counts, sizes, extensions and the first keys."""

    url: str
    samples: int = 0
    members: int = 0
    data_bytes: int = 0
    extension_counts: Counter[str] = field(default_factory=Counter)
    extension_bytes: Counter[str] = field(default_factory=Counter)
    first_keys: list[str] = field(default_factory=list)
    ignored_members: int = 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "url": redact_url(self.url),
            "samples": self.samples,
            "members": self.members,
            "data_bytes": self.data_bytes,
            "extensions": {
                ext: {"count": count, "bytes": self.extension_bytes[ext]}
                for ext, count in sorted(self.extension_counts.items())
            },
            "first_keys": self.first_keys,
            "ignored_members": self.ignored_members,
        }


def summarize_shard(
    url: str, storage_options: Mapping[str, Any] | None = None, keys_shown: int = 5
) -> ShardSummary:
    """Stream one shard and count its samples, members, bytes and extensions."""
    summary = ShardSummary(url)
    last_key: str | None = None
    for _, name, data in iter_members(url, storage_options):
        summary.members += 1
        summary.data_bytes += len(data)
        parts = split_name(name)
        if parts is None:
            summary.ignored_members += 1
            continue
        key, ext = parts
        summary.extension_counts[ext] += 1
        summary.extension_bytes[ext] += len(data)
        if key != last_key:
            summary.samples += 1
            last_key = key
            if len(summary.first_keys) < keys_shown:
                summary.first_keys.append(key)
    return summary
