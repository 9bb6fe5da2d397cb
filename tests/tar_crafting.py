"""Tar archives built byte by byte, hostile ones included, and what other readers see in them.

`header` writes one 512-byte header with any field the tests need to bend (kind, size field
text, prefix, magic, checksum); `pax_records` writes a pax extended header's records.
`tarfile_view` and `gnu_tar_view` are the oracles: the regular members (name, bytes) that
Python's tarfile and GNU tar see, or the error they stop with.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from typing import Any

BLOCK = 512
POSIX_MAGIC = b"ustar\x0000"
GNU_MAGIC = b"ustar  \x00"

Members = list[tuple[str, bytes]]


def _octal(value: int, width: int) -> bytes:
    return f"{value:0{width - 1}o}".encode() + b"\0"


def header(
    name: str | bytes,
    size: int | bytes = 0,
    kind: bytes = b"0",
    *,
    prefix: bytes = b"",
    magic: bytes = POSIX_MAGIC,
    linkname: bytes = b"",
    signed_checksum: bool = False,
    extra: bytes = b"",
) -> bytes:
    """One header block; ``size`` may be given as the raw 12-byte field."""
    raw_name = name.encode() if isinstance(name, str) else name
    block = bytearray(BLOCK)
    block[0 : len(raw_name)] = raw_name[:100]
    block[100:108] = _octal(0o644, 8)
    block[108:116] = _octal(0, 8)
    block[116:124] = _octal(0, 8)
    block[124:136] = size if isinstance(size, bytes) else _octal(size, 12)
    block[136:148] = _octal(1_700_000_000, 12)
    block[156:157] = kind
    block[157 : 157 + len(linkname)] = linkname
    block[257:265] = magic
    block[345 : 345 + len(prefix)] = prefix
    block[500 : 500 + len(extra)] = extra
    block[148:156] = b" " * 8
    checksum = sum(block)
    if signed_checksum:
        checksum -= 256 * sum(1 for byte in block if byte > 127)
    block[148:156] = f"{checksum:06o}".encode() + b"\0 "
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % BLOCK)


def member(name: str, data: bytes, kind: bytes = b"0", **fields: Any) -> bytes:
    return header(name, len(data), kind, **fields) + padded(data)


def pax_records(*records: tuple[str, str]) -> bytes:
    """``"%d %s=%s\\n"`` records, each length counting itself."""
    out = b""
    for key, value in records:
        body = f" {key}={value}\n".encode()
        length = len(body) + 1
        while len(str(length)) + len(body) != length:
            length = len(str(length)) + len(body)
        out += str(length).encode() + body
    return out


def pax_member(records: bytes, kind: bytes = b"x") -> bytes:
    return header("PaxHeaders/x", len(records), kind) + padded(records)


def archive(*parts: bytes) -> bytes:
    return b"".join(parts) + bytes(2 * BLOCK)


def tarfile_view(data: bytes) -> tuple[Members, str]:
    """Regular members as ``tarfile`` reads them (webdataset reads through it), and the
    error it raised (empty if none)."""
    members: Members = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive_file:
            for info in archive_file:
                if info.isreg():
                    extracted = archive_file.extractfile(info)
                    assert extracted is not None
                    members.append((info.name, extracted.read()))
    except (tarfile.TarError, OSError, ValueError) as error:
        return members, f"{type(error).__name__}: {error}"
    return members, ""


def gnu_tar_view(data: bytes) -> tuple[Members, str] | None:
    """Regular members as GNU tar lists and extracts them (None if there is no GNU tar)."""
    tar = shutil.which("tar")
    if tar is None or "GNU" not in subprocess.run([tar, "--version"], capture_output=True,
                                                  text=True, check=False).stdout:  # fmt: skip
        return None
    listing = subprocess.run(
        [tar, "-tv", "--quoting-style=literal", "--numeric-owner", "-f", "-"],
        input=data, capture_output=True, check=False, timeout=30,
        env={"LC_ALL": "C.UTF-8", "TZ": "UTC"},
    )  # fmt: skip
    contents = subprocess.run(
        [tar, "-xO", "-f", "-"], input=data, capture_output=True, check=False, timeout=30
    )
    error = (listing.stderr + contents.stderr).decode(errors="replace").strip()
    members: Members = []
    blob = contents.stdout
    for line in listing.stdout.decode("utf-8", "surrogateescape").splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or line[:1] not in ("-", "C"):  # C: contiguous, a regular file
            continue
        size = int(fields[2])
        members.append((fields[5], blob[:size]))
        blob = blob[size:]
    return members, error if listing.returncode or contents.returncode else ""
