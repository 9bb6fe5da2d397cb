"""JSON Lines files of documents, plain or compressed (gzip; zstd with ``zstandard``).

A unit is a byte range of a plain file (``unit_bytes``; a line belongs to the range it
starts in) or a whole compressed file; a document is a line, numbered from 0 within its
unit (blank lines keep their number and hold no document). A line that is not JSON, not
an object with the text field, or whose text is empty is bad data: an error naming the
file and the line, or, under ``on_error="skip"``, one document counted in the loader's
skip ledger.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import IO, Any

from conveyor.formats.errors import ErrorPolicy, SampleError
from conveyor.storage import get_filesystem, open_url, resolve_urls
from conveyor.text.documents import TextBatch, Unit

__all__ = ["JsonlDocuments"]


def _decompressed(url: str, raw: IO[bytes]) -> IO[bytes]:
    if url.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if url.endswith((".zst", ".zstd")):
        try:
            import zstandard
        except ImportError as error:
            raise ImportError(
                f"reading {url!r} needs the zstandard package: pip install 'conveyor[text]'"
            ) from error
        return zstandard.ZstdDecompressor().stream_reader(raw)
    return raw


def _lines(stream: IO[bytes], limit: int | None = None) -> Iterator[bytes]:
    """Lines of a binary stream, read in 1 MiB chunks (remote and zstd readers have no
    fast ``readline``); a last line without newline counts. ``limit``: only lines that
    start within the next ``limit`` bytes."""
    rest = b""
    at = 0  # where ``rest`` starts
    while chunk := stream.read(1 << 20):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if limit is not None and at >= limit:
                return
            yield line
            at += len(line) + 1
    if rest and (limit is None or at < limit):
        yield rest


def _seek_line(stream: IO[bytes], first: int) -> None:
    """Put ``stream`` at the first line that starts at byte ``first`` or after."""
    if first == 0:
        return
    stream.seek(first - 1)
    while byte := stream.read(1):  # the line that holds byte first - 1 belongs before
        if byte == b"\n":
            return


def _numbered(lines: Iterator[bytes], start: int, size: int) -> Iterator[list[tuple[int, bytes]]]:
    """Runs of up to ``size`` (number, line) from line ``start`` on, blank lines left out."""
    part: list[tuple[int, bytes]] = []
    for number, line in enumerate(lines):
        if number < start or not line.strip():
            continue
        part.append((number, line))
        if len(part) == size:
            yield part
            part = []
    if part:
        yield part


class JsonlDocuments:
    """Documents from the ``field`` of each line of JSONL files (local or remote URLs,
    globs and ``{a..b}`` braces as `TarShards` takes them), ``batch_size`` per batch."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        field: str = "text",
        batch_size: int = 256,
        unit_bytes: int = 64 << 20,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.urls = resolve_urls(urls, storage_options)
        if not self.urls:
            raise ValueError("JsonlDocuments needs at least one file")
        self.field = field
        self.batch_size = batch_size
        self.unit_bytes = unit_bytes
        self.storage_options = storage_options

    def units(self) -> list[Unit]:
        """A compressed file is one unit; a plain one is cut into ranges of about
        ``unit_bytes`` (a line belongs to the range it starts in)."""
        units = []
        for url in self.urls:
            if url.endswith((".gz", ".zst", ".zstd")):
                units.append(Unit(url))
                continue
            size = get_filesystem(url, self.storage_options).size(url)
            cuts = range(0, max(size, 1), self.unit_bytes)
            units += [Unit(url, a, min(size, a + self.unit_bytes)) for a in cuts]
        return units

    def identity(self) -> str:
        text = "\x00".join(["jsonl", *self.urls, self.field, str(self.unit_bytes)])
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def read(self, unit: Unit, start: int, errors: ErrorPolicy) -> Iterator[TextBatch]:
        try:
            raw = open_url(unit.url, self.storage_options)
        except OSError as error:
            errors.handle(SampleError(f"cannot open: {error}", unit.url))
            return
        with raw, _decompressed(unit.url, raw) as stream:
            limit = None
            if unit.stop is not None:  # a byte range of a plain file
                _seek_line(stream, unit.first)
                limit = unit.stop - stream.tell()
            try:
                for part in _numbered(_lines(stream, limit), start, self.batch_size):
                    numbers, texts = self._texts(unit.url, part, errors)
                    if texts:
                        yield TextBatch(numbers, texts)
            except (OSError, EOFError, ValueError) as error:  # a truncated or corrupt archive
                errors.handle(SampleError(f"cannot read on: {error}", unit.url))

    def _texts(
        self, url: str, part: list[tuple[int, bytes]], errors: ErrorPolicy
    ) -> tuple[list[int], list[str]]:
        """The documents of a run of lines: one ``json.loads`` for the run (a JSON array),
        line by line only when some line is bad."""
        try:
            records = json.loads(b"[" + b",".join(line for _, line in part) + b"]")
        except ValueError:
            records = None
        if records is None or len(records) != len(part):
            found = [(n, self._text(url, n, line, errors)) for n, line in part]
            kept = [(n, t) for n, t in found if t is not None]
            return [n for n, _ in kept], [t for _, t in kept]
        numbers: list[int] = []
        texts: list[str] = []
        for (number, _), record in zip(part, records, strict=True):
            text = self._field(url, number, record, errors)
            if text is not None:
                numbers.append(number)
                texts.append(text)
        return numbers, texts

    def _text(self, url: str, number: int, line: bytes, errors: ErrorPolicy) -> str | None:
        try:
            record = json.loads(line)
        except ValueError as error:
            errors.handle(SampleError(f"not JSON: {error}", url, f"line {number}"))
            return None
        return self._field(url, number, record, errors)

    def _field(self, url: str, number: int, record: Any, errors: ErrorPolicy) -> str | None:
        key = f"line {number}"
        if not isinstance(record, dict) or self.field not in record:
            errors.handle(SampleError(f"no field {self.field!r}", url, key))
            return None
        text = record[self.field]
        if not isinstance(text, str):
            errors.handle(SampleError(f"field {self.field!r} is not text", url, key))
            return None
        if not text:
            errors.handle(SampleError("empty document", url, key))
            return None
        return text
