"""Streaming tar reading: one pass over a (possibly remote, non-seekable) byte stream.

`read_members` walks the 512-byte headers itself (`conveyor.formats.tar_headers`: ustar, pax
``x`` records, GNU long names, all by the rules ``tarfile`` and GNU tar follow) so that every
member carries its byte ``offset``: a reader can resume at any member by seeking there,
without replaying the members before it. gzip-compressed archives are decompressed on the
fly (resuming one then decompresses up to the offset).

Bounded: a member larger than ``max_member_bytes`` is not read (its bytes are skipped; the
member comes with ``refused`` set, for the caller to raise or count), nor is an extended
header over `MAX_EXTENDED_BYTES`; every malformed header ends the pass with an error.

Errors name the archive URL and the offset: `SampleError` for a bad header checksum, a
truncated header or member, an unparsable number or pax record, a form tar readers disagree
on, an empty file, and an archive that ends without tar's end-of-archive (zero) blocks, i.e.
one cut short, even at a member boundary. After a corrupt header, `scan_rest` finds the
members that followed it (to count what was lost, never to deliver it).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from conveyor.formats.errors import SampleError
from conveyor.formats.grouping import split_name
from conveyor.formats.tar_headers import (
    BLOCK,
    GNU_LONG_LINK,
    GNU_LONG_NAME,
    GNU_SPARSE,
    NO_DATA_KINDS,
    PAX_GLOBAL,
    PAX_KINDS,
    REGULAR_KINDS,
    Header,
    TarCorruption,
    TarTruncation,
    parse_header,
    parse_pax,
)

__all__ = [
    "DEFAULT_MAX_MEMBER_BYTES",
    "MAX_EXTENDED_BYTES",
    "ScanResult",
    "TarCorruption",
    "TarMember",
    "TarReadError",
    "TarTruncation",
    "open_archive",
    "read_members",
    "scan_rest",
]

DEFAULT_MAX_MEMBER_BYTES = 1 << 30
"""Members over 1 GiB are refused by default: one member is held in memory whole, and a
small gzip input can claim (and inflate to) gigabytes."""
MAX_EXTENDED_BYTES = 1 << 20
"""A pax or GNU long-name header over 1 MiB is refused (names are at most a few KiB)."""

_ZERO_BLOCK = bytes(BLOCK)
_SKIP_CHUNK = 1 << 20
_GLOBAL_REFUSED = ("path", "size", "linkpath")


class TarReadError(SampleError):
    """The stream under the archive failed (network, decompression); ``key`` names the
    sample whose member was being read, if its header had been read."""


@dataclass(frozen=True, slots=True)
class TarMember:
    """A regular file of an archive: its name, bytes and place in the archive.

    ``offset`` is where its first header (pax or long-name header included) starts and
    ``end`` where the next member's header starts: resume at ``end`` to continue after it.
    ``refused`` says why ``data`` was not read (empty then), e.g. the member is larger than
    ``max_member_bytes``; the caller raises or counts it.
    """

    name: str
    data: bytes
    offset: int
    end: int
    refused: str = ""


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
    if _discard(stream, start) < start:
        raise TarTruncation("archive ends before the resume offset", url, offset=start)


def _discard(stream: IO[bytes], count: int) -> int:
    """Read and drop ``count`` bytes, a chunk at a time; the number actually dropped."""
    left = count
    while left:
        chunk = stream.read(min(left, _SKIP_CHUNK))
        if not chunk:
            break
        left -= len(chunk)
    return count - left


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


def read_members(
    stream: IO[bytes],
    url: str,
    start: int = 0,
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
) -> Iterator[TarMember]:
    """Yield the regular files of the archive in ``stream``, from header offset ``start``.

    ``stream`` is positioned at ``start`` first (seek, or read-and-discard if it cannot
    seek). Directories, links and other special members are skipped; the archive ends at
    a zero block. A member over ``max_member_bytes`` comes with ``refused`` set and no
    data. Raises `SampleError` for an empty file, a malformed header and an end of stream
    before the zero block (a cut archive). The caller owns (and closes) ``stream``.
    """
    _skip_to(stream, start, url)
    return _Walk(stream, url, start, max_member_bytes).members()


class _Walk:
    """One pass over the headers. Extension headers (pax ``x``, GNU ``L``/``K``) apply to
    the member after them; ``first`` is where that member's first header starts."""

    def __init__(self, stream: IO[bytes], url: str, start: int, max_member_bytes: int) -> None:
        self.stream = stream
        self.url = url
        self.position = start
        self.first = start
        self.max_member_bytes = max_member_bytes
        self.pax: dict[str, str] | None = None
        self.long_name: str | None = None
        self.long_link = False

    def members(self) -> Iterator[TarMember]:
        while True:
            block = _read(self.stream, BLOCK, self.url, self.position, "")
            if not block:
                raise self._cut()
            if block == _ZERO_BLOCK:
                if self.first != self.position:
                    raise self._corrupt("an extended header with no member after it")
                return
            header = parse_header(block, self.url, self.position)
            member = self._take(header)
            if member is not None:
                yield member

    def _take(self, header: Header) -> TarMember | None:
        kind = header.kind
        if kind in PAX_KINDS or kind == PAX_GLOBAL or kind in (GNU_LONG_NAME, GNU_LONG_LINK):
            self._extension(header)
            return None
        if kind == GNU_SPARSE or (self.pax and any(k.startswith("GNU.sparse.") for k in self.pax)):
            raise self._corrupt("a GNU sparse member (not supported)")
        name, size = self._name_and_size(header)
        regular = kind in REGULAR_KINDS and not (kind == b"\0" and header.name.endswith("/"))
        if not regular and size and (kind in NO_DATA_KINDS or kind == b"\0"):
            raise self._corrupt(f"a type {kind!r} member with {size} bytes (readers disagree)")
        data, refused = b"", ""
        if regular and size > self.max_member_bytes:
            refused = f"tar member {name!r} of {size} bytes is over max_member_bytes="
            refused += f"{self.max_member_bytes}"
            self._skip(size, name)
        elif regular:
            data = self._data(size, name)
        elif kind not in NO_DATA_KINDS and kind != b"\0":
            self._skip(size, "")  # an unknown type: its data is skipped, as tarfile does
        first = self.first
        self.pax, self.long_name, self.long_link = None, None, False
        member = TarMember(name, data, first, self._advance(size), refused)
        return member if regular else None

    def _name_and_size(self, header: Header) -> tuple[str, int]:
        name, size = self.long_name or header.name, header.size
        pax = self.pax or {}
        if "path" in pax:
            name = pax["path"].rstrip("/")
        if "size" in pax:
            size = _pax_size(pax["size"], self.url, self.position)
        if not name:
            raise self._corrupt("a member without a name")
        return name, size

    def _extension(self, header: Header) -> None:
        kind = header.kind
        if header.size > MAX_EXTENDED_BYTES:
            raise self._corrupt(f"an extended header of {header.size} bytes")
        data = self._data(header.size, "")
        if kind == PAX_GLOBAL:
            if self.first != self.position:
                raise self._corrupt("a pax global header between a member's headers")
            records = parse_pax(data, self.url, self.position)
            refused = [key for key in _GLOBAL_REFUSED if key in records]
            if refused or any(key.startswith("GNU.sparse.") for key in records):
                raise self._corrupt(f"a pax global header that sets {refused or 'sparse'}")
            self.first = self._advance(header.size)
            return
        if kind in PAX_KINDS and self.pax is None and self.long_name is None:
            self.pax = parse_pax(data, self.url, self.position)
        elif kind == GNU_LONG_NAME and self.long_name is None and self.pax is None:
            self.long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        elif kind == GNU_LONG_LINK and not self.long_link and self.pax is None:
            self.long_link = True  # a link's target: nothing a regular file needs
        else:  # tarfile takes the first of two, GNU tar the last: refuse the ambiguity
            raise self._corrupt("more than one extended header for one member")
        self._advance(header.size)

    def _data(self, size: int, name: str) -> bytes:
        """The ``size`` bytes after the header (and its padding); ``name``: the regular
        member they belong to, if any (its sample is named in errors)."""
        data = _read(self.stream, size, self.url, self.position, name)
        if len(data) < size:
            what = repr(name) if name else "extended header"
            reason = f"truncated tar member {what}"
            raise TarTruncation(reason, self.url, _key(name), self.position)
        if size % BLOCK:
            _read(self.stream, -size % BLOCK, self.url, self.position, name)
        return data

    def _skip(self, size: int, name: str) -> None:
        padded = size + -size % BLOCK
        try:
            skipped = _discard(self.stream, padded)
        except Exception as error:
            reason = f"cannot read archive: {type(error).__name__}: {error}"
            raise TarReadError(reason, self.url, _key(name), self.position) from error
        if skipped < size:
            raise TarTruncation("truncated tar member", self.url, _key(name), self.position)

    def _advance(self, size: int) -> int:
        """Move past the header at ``position`` and its ``size`` bytes of data."""
        self.position += BLOCK + size + -size % BLOCK
        if self.pax is None and self.long_name is None and not self.long_link:
            self.first = self.position
        return self.position

    def _cut(self) -> TarTruncation:
        if self.position == 0:
            return TarTruncation("empty shard: 0 bytes, not a tar archive", self.url, offset=0)
        reason = "shard cut short: it ends without tar's end-of-archive blocks"
        return TarTruncation(reason, self.url, offset=self.position)

    def _corrupt(self, what: str) -> TarCorruption:
        return TarCorruption(f"corrupt tar archive: {what}", self.url, offset=self.position)


def _pax_size(value: str, url: str, offset: int) -> int:
    if not value.isascii() or not value.isdigit():
        raise TarCorruption(f"corrupt pax header: size {value!r}", url, offset=offset)
    return int(value)


def _key(name: str) -> str:
    parts = split_name(name) if name else None
    return parts[0] if parts else ""


def _read(stream: IO[bytes], size: int, url: str, offset: int, name: str) -> bytes:
    """``size`` bytes (fewer only at the end); a failing stream becomes `TarReadError`
    naming the sample of member ``name`` when its header was read."""
    try:
        return _read_exact(stream, size)
    except SampleError:
        raise
    except Exception as error:  # a remote read that gave up, a corrupt gzip stream, ...
        verb = "cannot open" if isinstance(error, FileNotFoundError) else "cannot read archive"
        reason = f"{verb}: {type(error).__name__}: {error}"
        raise TarReadError(reason, url, _key(name), offset) from error


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
        parse_header(block, "", 0)
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
