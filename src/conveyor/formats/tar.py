"""Streaming tar reading: one pass over a (possibly remote, non-seekable) byte stream.

`read_members` parses 512-byte headers itself (ustar, pax ``x`` records and GNU long names)
so that every member carries its byte ``offset``: a reader can resume at any member by
seeking there, without replaying the members before it. gzip-compressed archives are
decompressed on the fly (resuming one then decompresses up to the offset).

Errors name the archive URL and the offset: `SampleError` for a bad header checksum, a
truncated header or member, an unparsable size field, an empty file, and an archive that
ends without tar's end-of-archive (zero) blocks, i.e. one cut short, even at a member
boundary. After a corrupt header, `scan_rest` finds the members that followed it (to count
what was lost, never to deliver it).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from conveyor.formats.errors import SampleError
from conveyor.formats.grouping import split_name

__all__ = [
    "ScanResult",
    "TarCorruption",
    "TarMember",
    "TarReadError",
    "TarTruncation",
    "open_archive",
    "read_members",
    "scan_rest",
]

BLOCK = 512
_ZERO_BLOCK = bytes(BLOCK)
_REGULAR = frozenset(b"07\0")
_GZIP_MAGIC = b"\x1f\x8b"


class TarCorruption(SampleError):
    """A header that is not one (bad checksum, unparsable number): what follows may be fine."""


class TarTruncation(SampleError):
    """The archive stops early: empty, cut inside a header or member, or no end blocks.
    ``key`` names the sample of a member cut short (its header was fine)."""


class TarReadError(SampleError):
    """The stream under the archive failed (network, decompression); ``key`` names the
    sample whose member was being read, if its header had been read."""


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
            raise TarTruncation("archive ends before the resume offset", url, offset=start)
        remaining -= len(chunk)


def _number(field: bytes, url: str, offset: int) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256 for large values
        return int.from_bytes(field[1:], "big")
    text = field.rstrip(b"\0 ").lstrip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise TarCorruption(
            f"corrupt tar header: bad number {field!r}", url, offset=offset
        ) from None


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
        raise TarTruncation("truncated tar header", url, offset=offset)
    stored = _number(header[148:156], url, offset)
    actual = sum(header) - sum(header[148:156]) + 8 * 32
    if stored != actual:
        raise TarCorruption("corrupt tar header: checksum mismatch", url, offset=offset)


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
    a zero block. Raises `SampleError` for an empty file and for an end of stream before
    the zero block (a cut archive). The caller owns (and closes) ``stream``.
    """
    _skip_to(stream, start, url)
    position = start
    long_name: str | None = None
    first = start
    while True:
        header = _read(stream, BLOCK, url, position, "")
        if not header:
            if position == 0:
                raise TarTruncation("empty shard: 0 bytes, not a tar archive", url, offset=0)
            raise TarTruncation(
                "shard cut short: it ends without tar's end-of-archive blocks", url, offset=position
            )
        if header == _ZERO_BLOCK:
            return
        _check_header(header, url, position)
        size = _number(header[124:136], url, position)
        kind = header[156]
        name = long_name or _member_name(header)
        key = _key(name) if kind in _REGULAR else ""
        data = _read(stream, size, url, position, key)
        if len(data) < size:
            raise TarTruncation(f"truncated tar member {name!r}", url, key, position)
        padding = -size % BLOCK
        if padding:
            _read(stream, padding, url, position, key)
        end = position + BLOCK + size + padding
        if kind == ord("x"):
            long_name = _pax_path(data) or long_name
        elif kind == ord("L"):
            long_name = _text(data)
        elif kind in _REGULAR:
            yield TarMember(name, data, first, end)
            long_name = None
        else:
            long_name = None  # directories, links, global pax headers: nothing to yield
        position = end
        if long_name is None:
            first = end


def _member_name(header: bytes) -> str:
    name = _text(header[0:100])
    prefix = _text(header[345:500]) if header[257:262] == b"ustar" else ""
    return f"{prefix}/{name}" if prefix else name


def _key(name: str) -> str:
    parts = split_name(name)
    return parts[0] if parts else ""


def _read(stream: IO[bytes], size: int, url: str, offset: int, key: str) -> bytes:
    """``size`` bytes (fewer only at the end); a failing stream becomes `TarReadError`
    naming the member's sample (``key``) when its header was read."""
    try:
        return _read_exact(stream, size)
    except SampleError:
        raise
    except Exception as error:  # a remote read that gave up, a corrupt gzip stream, ...
        verb = "cannot open" if isinstance(error, FileNotFoundError) else "cannot read archive"
        reason = f"{verb}: {type(error).__name__}: {error}"
        raise TarReadError(reason, url, key, offset) from error


@dataclass(frozen=True)
class ScanResult:
    """Members found by `scan_rest`; ``clean`` when one unbroken chain of headers led from
    the first one found to the end-of-archive blocks and the end of the file (then
    ``names`` is exactly what the archive held after the corrupt header)."""

    names: list[str]
    clean: bool


class _Prefixed:
    """A reader that gives ``head`` first, then the rest of ``stream``."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self._head = head
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        if not self._head:
            return self._stream.read(size)
        taken = self._head if size < 0 else self._head[:size]
        self._head = self._head[len(taken) :]
        if size < 0 or len(taken) < size:
            taken += self._stream.read(-1 if size < 0 else size - len(taken))
        return taken

    def seekable(self) -> bool:
        return False


def _is_header(block: bytes) -> bool:
    """A ustar/GNU header with a valid checksum (the magic makes a false match in random
    data about 2**-40 per block)."""
    if block[257:262] != b"ustar":
        return False
    try:
        _check_header(block, "", 0)
    except SampleError:
        return False
    return True


def _after_end(stream: IO[bytes]) -> bytes | None:
    """Read past the end-of-archive blocks: None at a clean end of file, else the first
    non-zero block (the archive went on: the end found was a nested archive's)."""
    while True:
        block = _read_exact(stream, BLOCK)
        if len(block) < BLOCK:
            return None if not block.strip(b"\0") else block
        if block != _ZERO_BLOCK:
            return block


def scan_rest(stream: IO[bytes], url: str) -> ScanResult:
    """The members after a corrupt header, reading ``stream`` from where it is to its end.

    Looks at each 512-byte block for a valid header, then follows the headers' sizes as
    `read_members` does; a second corrupt header or a stray end-of-archive restarts the
    search and makes the result not ``clean``. Nothing found is trusted as data.
    """
    names: list[str] = []
    found = broken = False
    pending: bytes | None = None
    while True:
        block = pending if pending is not None else _read_exact(stream, BLOCK)
        pending = None
        if len(block) < BLOCK:
            return ScanResult(names, clean=False)
        if not _is_header(block):
            broken = broken or found
            continue
        found = True
        chain: Any = _Prefixed(block, stream)
        try:
            names.extend(member.name for member in read_members(chain, url))
        except SampleError:
            broken = True
            continue
        pending = _after_end(stream)
        if pending is None:
            return ScanResult(names, clean=not broken)
        broken = True
