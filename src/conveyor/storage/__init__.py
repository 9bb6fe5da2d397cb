"""Storage: list and open local and remote files (fsspec), and cache remote shards locally.

Local paths need only the standard library; remote URLs need ``pip install conveyor[remote]``.
Remote reads have timeouts and retries (`RemoteOptions`) and resume at the byte offset
reached (`RangedReader`). This package never imports torch.
"""

from conveyor.storage.cache import ShardCache, ShardCacheWarning
from conveyor.storage.filesystems import (
    DEFAULT_BLOCK_BYTES,
    FileSystem,
    get_filesystem,
    is_local,
    list_files,
    open_url,
    prepare_url,
    release_connections,
    scheme_of,
)
from conveyor.storage.options import RemoteOptions
from conveyor.storage.patterns import expand_braces, resolve_urls
from conveyor.storage.ranged import RangedReader
from conveyor.storage.redaction import redact_text, redact_url
from conveyor.storage.retry import ObjectChangedError, RemoteReadError, failed_requests

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "FileSystem",
    "ObjectChangedError",
    "RangedReader",
    "RemoteOptions",
    "RemoteReadError",
    "ShardCache",
    "ShardCacheWarning",
    "expand_braces",
    "failed_requests",
    "get_filesystem",
    "is_local",
    "list_files",
    "open_url",
    "prepare_url",
    "redact_text",
    "redact_url",
    "release_connections",
    "resolve_urls",
    "scheme_of",
]
