"""Storage: list and open local and remote files (fsspec), and cache remote shards locally.

Local paths need only the standard library; remote URLs need ``pip install conveyor[remote]``.
Remote reads have timeouts and retries (`RemoteOptions`), resume at the byte offset
reached, honour throttling, hedge late first bytes and read ahead (`RangedReader`); what
they asked of the stores is counted (`request_counts`). This package never imports torch.
"""

from conveyor.stats.requests import RequestCounts
from conveyor.storage.cache import ShardCache, ShardCacheWarning
from conveyor.storage.filesystems import (
    DEFAULT_BLOCK_BYTES,
    FileSystem,
    get_filesystem,
    is_local,
    list_files,
    open_early,
    open_url,
    prepare_remote,
    release_connections,
    scheme_of,
)
from conveyor.storage.options import RemoteOptions
from conveyor.storage.patterns import expand_braces, resolve_urls
from conveyor.storage.ranged import RangedReader
from conveyor.storage.redaction import redact_text, redact_url
from conveyor.storage.request_tally import request_counts
from conveyor.storage.retry import ObjectChangedError, RemoteReadError, failed_requests

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "FileSystem",
    "ObjectChangedError",
    "RangedReader",
    "RemoteOptions",
    "RemoteReadError",
    "RequestCounts",
    "ShardCache",
    "ShardCacheWarning",
    "expand_braces",
    "failed_requests",
    "get_filesystem",
    "prepare_remote",
    "is_local",
    "list_files",
    "open_early",
    "open_url",
    "redact_text",
    "redact_url",
    "release_connections",
    "request_counts",
    "resolve_urls",
    "scheme_of",
]
