"""Streaming tar reading: one pass over a (possibly remote, non-seekable) byte stream.

`read_members` parses 512-byte headers itself (ustar, pax ``x`` records and GNU long names)
so that every member carries its byte ``offset``: a reader can resume at any member by
seeking there, without replaying the members before it. gzip-compressed archives are
decompressed on the fly (resuming one then decompresses up to the offset).

Errors name the archive URL and the offset: `SampleError` for a bad header checksum, a
truncated header or member, or an unparsable size field.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from conveyor.formats.errors import SampleError

__all__ = ["TarMember", "open_archive", "read_members"]

BLOCK = 512
_ZERO_BLOCK = bytes(BLOCK)
_REGULAR = frozenset(b"07\0")
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class TarMember:
    """A regular file of an archive: its name, bytes and place in the archive.

    ``offset`` is where its first header (pax or long-name header included) starts and
    ``end`` where the next member's header starts: resume at ``end`` to continue after it.
    """

    name: str
    data: bytes
    offset: int
    end: int


def open_archive(stream: IO[bytes], url: str) -> IO[bytes]:
    """``stream`` itself, or a gzip decompressor over it for ``.tgz``/``.gz`` archives."""
    lowered = url.lower()
    if lowered.endswith((".gz", ".tgz")):
        return gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[return-value]
    return stream


def _skip_to(stream: IO[bytes], start: int, url: str) -> None:
    if start <= 0:
        return
    try:
        if stream.seekable():
            stream.seek(start)
            return
    except (AttributeError, OSError):
        pass
    remaining = start
    while remaining:
        chunk = stream.read(min(remaining, 1 << 20))
        if not chunk:
            raise SampleError("archive ends before the resume offset", url, offset=start)
        remaining -= len(chunk)


def _number(field: bytes, url: str, offset: int) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256 for large values
        return int.from_bytes(field[1:], "big")
    text = field.rstrip(b"\0 ").lstrip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise SampleError(f"corrupt tar header: bad number {field!r}", url, offset=offset) from None


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax_path(records: bytes) -> str | None:
    path = None
    position = 0
    while position < len(records):
        space = records.find(b" ", position)
        if space < 0:
            break
        length = int(records[position:space])
        key, _, value = records[space + 1 : position + length - 1].partition(b"=")
        if key == b"path":
            path = value.decode("utf-8", "surrogateescape")
        position += length
    return path


def _check_header(header: bytes, url: str, offset: int) -> None:
    if len(header) < BLOCK:
        raise SampleError("truncated tar header", url, offset=offset)
    stored = _number(header[148:156], url, offset)
    actual = sum(header) - sum(header[148:156]) + 8 * 32
    if stored != actual:
        raise SampleError("corrupt tar header: checksum mismatch", url, offset=offset)


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if len(data) == size or not data:
        return data
    parts = [data]
    missing = size - len(data)
    while missing:
        more = stream.read(missing)
        if not more:
            break
        parts.append(more)
        missing -= len(more)
    return b"".join(parts)


def read_members(stream: IO[bytes], url: str, start: int = 0) -> Iterator[TarMember]:
    """Yield the regular files of the archive in ``stream``, from header offset ``start``.

    ``stream`` is positioned at ``start`` first (seek, or read-and-discard if it cannot
    seek). Directories, links and other special members are skipped; the archive ends at
    a zero block or at end of stream. The caller owns (and closes) ``stream``.
    """
    _skip_to(stream, start, url)
    position = start
    long_name: str | None = None
    first = start
    while True:
        header = stream.read(BLOCK)
        if not header or header == _ZERO_BLOCK:
            return
        _check_header(header, url, position)
        size = _number(header[124:136], url, position)
        kind = header[156]
        data = _read_exact(stream, size)
        name_hint = _text(header[0:100])
        if len(data) < size:
            raise SampleError(f"truncated tar member {name_hint!r}", url, offset=position)
        padding = -size % BLOCK
        if padding:
            stream.read(padding)
        end = position + BLOCK + size + padding
        if kind == ord("x"):
            long_name = _pax_path(data) or long_name
        elif kind == ord("L"):
            long_name = _text(data)
        elif kind in _REGULAR:
            name = long_name
            if name is None:
                prefix = _text(header[345:500]) if header[257:262] == b"ustar" else ""
                name = f"{prefix}/{name_hint}" if prefix else name_hint
            yield TarMember(name, data, first, end)
            long_name = None
        else:
            long_name = None  # directories, links, global pax headers: nothing to yield
        position = end
        if long_name is None:
            first = end
