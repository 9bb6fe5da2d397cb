"""One tar header block and one pax extended header, parsed strictly.

The rules are those of POSIX ustar/pax and GNU tar as Python's ``tarfile`` and GNU tar apply
them, so that conveyor sees exactly the members they see; where the tools would disagree or
bend a rule (a number field with a sign, a malformed pax record, a name prefix in a GNU
header), the header is refused (`TarCorruption`) instead of guessed at. A reader may then see
fewer members than ``tarfile``, never other ones. Every loop here advances: a pax record's
length must cover the record, so a zero length cannot spin.
"""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.formats.errors import SampleError

__all__ = [
    "BLOCK",
    "GNU_LONG_LINK",
    "GNU_LONG_NAME",
    "GNU_SPARSE",
    "NO_DATA_KINDS",
    "PAX_GLOBAL",
    "PAX_KINDS",
    "REGULAR_KINDS",
    "Header",
    "TarCorruption",
    "TarTruncation",
    "parse_header",
    "parse_pax",
]

BLOCK = 512
REGULAR_KINDS = frozenset({b"0", b"\0", b"7"})
"""Regular files (``tarfile``'s REGTYPE, AREGTYPE, CONTTYPE): members with data to yield."""
NO_DATA_KINDS = frozenset({b"1", b"2", b"3", b"4", b"5", b"6"})
"""Links, devices, directories, FIFOs: ``tarfile`` reads no data after these whatever their
size field says, GNU tar may; so a non-zero size there is refused."""
PAX_KINDS = frozenset({b"x", b"X"})  # X: Solaris' name for the same
PAX_GLOBAL = b"g"
GNU_LONG_NAME, GNU_LONG_LINK, GNU_SPARSE = b"L", b"K", b"S"
_GNU_KINDS = frozenset({GNU_LONG_NAME, GNU_LONG_LINK, GNU_SPARSE})
_GNU_MAGIC = b"ustar  \0"
_OCTAL = b"01234567"
_HIGH_BYTES = bytes(range(128, 256))


class TarCorruption(SampleError):
    """A header that is not one (bad checksum, unparsable number, malformed pax record, a
    form tar readers disagree on): what follows may be fine."""


class TarTruncation(SampleError):
    """The archive stops early: empty, cut inside a header or member, or no end blocks.
    ``key`` names the sample of a member cut short (its header was fine)."""


@dataclass(frozen=True, slots=True)
class Header:
    """What one 512-byte header says: ``kind`` is the type flag (one byte)."""

    name: str
    size: int
    kind: bytes


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def parse_number(field: bytes, url: str, offset: int) -> int:
    """An octal number field (digits, optionally space-padded, ended by NUL or space) or
    GNU's base-256 form (first byte 0x80, or 0xff for a negative number)."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - 256 ** (len(field) - 1) if field[0] == 0xFF else value
    text = field.split(b"\0", 1)[0].strip(b" ")
    if text.translate(None, _OCTAL):  # anything but octal digits (a sign, "0o", "_", ...)
        raise TarCorruption(f"corrupt tar header: bad number {field!r}", url, offset=offset)
    return int(text, 8) if text else 0


def _checksum_holds(block: bytes, stored: int) -> bool:
    """The header's bytes add up to ``stored``, the checksum field counted as spaces: as
    unsigned bytes, or as signed ones (old Sun tars)."""
    unsigned = sum(block) - sum(block[148:156]) + 8 * 32
    if stored == unsigned:
        return True
    field = block[148:156]
    high = len(block) - len(block.translate(None, _HIGH_BYTES))
    high -= len(field) - len(field.translate(None, _HIGH_BYTES))
    return stored == unsigned - 256 * high


def parse_header(block: bytes, url: str, offset: int) -> Header:
    """The header in ``block`` (not a zero block); `TarCorruption` if it is none."""
    if len(block) < BLOCK:
        raise TarTruncation("truncated tar header", url, offset=offset)
    if not _checksum_holds(block, parse_number(block[148:156], url, offset)):
        raise TarCorruption("corrupt tar header: checksum mismatch", url, offset=offset)
    size = parse_number(block[124:136], url, offset)
    if size < 0:
        raise TarCorruption(f"corrupt tar header: negative size {size}", url, offset=offset)
    kind = block[156:157]
    name = _text(block[0:100])
    prefix = _text(block[345:500]) if block[345] else ""
    if prefix and kind not in _GNU_KINDS:
        if block[257:265] == _GNU_MAGIC:  # GNU keeps times there, which tarfile takes for a name
            reason = "a GNU tar header with data in the ustar name prefix (readers disagree)"
            raise TarCorruption(f"unsupported tar header: {reason}", url, offset=offset)
        name = f"{prefix}/{name}"
    return Header(name, size, kind)


def parse_pax(data: bytes, url: str, offset: int) -> dict[str, str]:
    """The records of a pax extended header: ``"%d %s=%s\\n"`` each, the length counting the
    whole record. Anything else is `TarCorruption` (GNU tar refuses such headers too)."""
    records: dict[str, str] = {}
    position = 0
    while position < len(data):
        space = data.find(b" ", position, position + 21)
        digits = data[position:space] if space > position else b""
        if not digits or not all(byte in b"0123456789" for byte in digits):
            raise _bad_pax("a record without its length", url, offset)
        end = position + int(digits)
        record = data[space + 1 : end]
        keyword, equals, value = record[:-1].partition(b"=")
        if end > len(data) or not record.endswith(b"\n") or not equals or not keyword:
            raise _bad_pax(f"a malformed record of length {int(digits)}", url, offset)
        records[keyword.decode("utf-8", "surrogateescape")] = value.decode(
            "utf-8", "surrogateescape"
        )
        position = end
    return records


def _bad_pax(what: str, url: str, offset: int) -> TarCorruption:
    return TarCorruption(f"corrupt pax header: {what}", url, offset=offset)
