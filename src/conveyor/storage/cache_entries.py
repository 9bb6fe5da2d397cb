"""One shard cache entry: its name (from everything that identifies the object), its record
(size and CRC-32 of the bytes), and the check that comes before any byte of it is served.

An entry is two files in the cache directory: the shard's bytes, ``<key>-<name>``, and its
record, ``.<key>-<name>.meta`` (JSON: plain data, never code). ``key`` is a digest of the
URL with its secrets redacted and of the ``storage_options`` without secret-looking fields
(an endpoint, a region, a profile stay; keys, tokens, passwords go), so the same
``s3://bucket/x.tar`` from two endpoints is two entries, and no secret reaches a file name
or a record. Before an entry is used, its size and CRC-32 must match the record and the
file must be a regular file of this user: a truncated, corrupted, half-replaced or planted
entry is never served.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import zlib
from collections.abc import Mapping
from typing import IO, Any

from conveyor.storage.redaction import SECRET_PARAMETER, redact_url

__all__ = [
    "EntryRecord",
    "entry_name",
    "identity",
    "open_verified",
    "record_path",
    "remove_entry",
    "write_record",
]

_RECORD_VERSION = 1
_RECORD_MAX_BYTES = 64 << 10
_CHECK_CHUNK = 1 << 20
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")

EntryRecord = dict[str, Any]


def identity(value: Any) -> Any:
    """``value`` as plain, stable JSON data with secret-looking fields left out (objects
    such as a client timeout count by their type only: their repr may hold addresses)."""
    if isinstance(value, Mapping):
        return {
            str(key): identity(item)
            for key, item in sorted(value.items(), key=lambda pair: str(pair[0]))
            if not SECRET_PARAMETER.search(str(key))
        }
    if isinstance(value, list | tuple):
        return [identity(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def entry_name(url: str, storage_options: Mapping[str, Any] | None) -> str:
    """``<digest>-<basename>``: the digest of the redacted URL and the options' identity;
    the basename (no query, no secret) only helps a person reading the directory."""
    shown = redact_url(url)
    key = json.dumps([shown, identity(storage_options or {})], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    path = shown.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    base = _NAME_CHARS.sub("_", path.rsplit("/", 1)[-1])[-80:]
    return f"{digest}-{base}" if base else digest


def record_path(path: str) -> str:
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.meta")


def write_record(path: str, temp: str, url: str, size: int, crc32: int) -> None:
    """Write the entry's record through ``temp``, renamed into place (atomic)."""
    record = {"version": _RECORD_VERSION, "url": redact_url(url), "size": size, "crc32": crc32}
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(descriptor, "w", encoding="utf-8") as out:
        json.dump(record, out)
    os.replace(temp, record_path(path))


def _read_record(path: str) -> EntryRecord | None:
    try:
        descriptor = os.open(record_path(path), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with open(descriptor, "rb") as handle:
        if os.fstat(handle.fileno()).st_uid != os.getuid():
            return None
        raw = handle.read(_RECORD_MAX_BYTES + 1)
    try:
        record = json.loads(raw) if len(raw) <= _RECORD_MAX_BYTES else None
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("version") != _RECORD_VERSION:
        return None
    if not isinstance(record.get("size"), int) or not isinstance(record.get("crc32"), int):
        return None
    return record


def _crc32_of(handle: IO[bytes]) -> int:
    crc = 0
    while chunk := handle.read(_CHECK_CHUNK):
        crc = zlib.crc32(chunk, crc)
    return crc


def open_verified(path: str) -> IO[bytes] | None:
    """The entry at ``path``, open at byte 0, if it is whole and ours; None if there is none
    or it fails a check (the caller then fetches the object again)."""
    record = _read_record(path)
    if record is None:
        return None
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    handle = open(descriptor, "rb")  # noqa: SIM115 - returned to the caller
    try:
        info = os.fstat(handle.fileno())
        whole = stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid()
        if whole and info.st_size == record["size"] and _crc32_of(handle) == record["crc32"]:
            handle.seek(0)
            return handle
    except OSError:
        pass
    handle.close()
    return None


def remove_entry(path: str) -> None:
    """Delete an entry and its record (either may be missing)."""
    for leftover in (path, record_path(path)):
        with contextlib.suppress(OSError):  # gone already, or a read-only cache
            os.unlink(leftover)
