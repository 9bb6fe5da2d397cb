"""Parquet files of documents through pyarrow: one column read, one row group at a time.

One row group is one unit (footers are read once, when the units are listed); a document
is a row, numbered from 0 in its row group. Reading opens the footer, jumps to the row
group and reads only the text column (a projection), a row group at a time: memory is
one row group's column, and remote files are read by byte ranges through
`conveyor.storage` (timeouts, retries). The column holds strings (tokenized in the
worker) or lists of integers (token ids, used as they are). Bad data is named by file,
row group and row: a file pyarrow cannot open, a missing column, a row group that does
not decode (its rows counted), an empty or null document.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from conveyor.formats.errors import ErrorPolicy, SampleError
from conveyor.formats.loss_estimates import Loss
from conveyor.storage import open_url, resolve_urls
from conveyor.text.documents import TextBatch, TokenBatch, Unit

__all__ = ["ParquetDocuments"]


def _pyarrow() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as error:
        raise ImportError("ParquetDocuments needs pyarrow: pip install 'conveyor[text]'") from error
    return pq


def _renumbered(
    batches: Iterator[TextBatch | TokenBatch], first: int
) -> Iterator[TextBatch | TokenBatch]:
    """Rows numbered within their unit (a row group), not the file."""
    for batch in batches:
        if first == 0:
            yield batch
        elif isinstance(batch, TextBatch):
            yield TextBatch([n - first for n in batch.numbers], batch.texts)
        else:
            yield TokenBatch(batch.numbers - first, batch.tokens, batch.offsets)


class ParquetDocuments:
    """Documents from ``column`` of Parquet files (local or remote URLs, globs, braces),
    in batches of up to ``batch_size`` rows."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        column: str = "text",
        batch_size: int = 1024,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        _pyarrow()
        self.urls = resolve_urls(urls, storage_options)
        if not self.urls:
            raise ValueError("ParquetDocuments needs at least one file")
        self.column = column
        self.batch_size = batch_size
        self.storage_options = storage_options

    def units(self) -> list[Unit]:
        """One unit per row group (footers read once, here, for every consumer); a file
        whose footer cannot be read is one unit, its error raised or counted when read."""
        return [unit for url in self.urls for unit in self._groups(url)]

    def _groups(self, url: str) -> list[Unit]:
        pq = _pyarrow()
        try:
            with open_url(url, self.storage_options) as stream:
                meta = pq.ParquetFile(stream).metadata
        except Exception:  # read() names the error with the file
            return [Unit(url)]
        units, first = [], 0
        for group in range(meta.num_row_groups):
            rows = int(meta.row_group(group).num_rows)
            units.append(Unit(url, first, first + rows))
            first += rows
        return units or [Unit(url, 0, 0)]

    def identity(self) -> str:
        text = "parquet\x00" + "\x00".join(self.urls) + "\x00" + self.column
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def read(self, unit: Unit, start: int, errors: ErrorPolicy) -> Iterator[TextBatch | TokenBatch]:
        pq = _pyarrow()
        url = unit.url
        try:
            stream = open_url(url, self.storage_options)
        except OSError as error:
            errors.handle(SampleError(f"cannot open: {error}", url))
            return
        with stream:
            try:
                parquet = pq.ParquetFile(stream)
            except Exception as error:  # pyarrow's ArrowInvalid, OSError, ...
                errors.handle(SampleError(f"not a readable Parquet file: {error}", url))
                return
            meta = parquet.metadata
            begin = unit.first + start  # rows [begin, stop) of the file, in whole groups
            stop = int(meta.num_rows) if unit.stop is None else unit.stop
            if self.column not in parquet.schema_arrow.names:
                loss = Loss(stop - begin, (f"rows {begin}-{stop - 1}",))
                errors.handle(SampleError(f"no column {self.column!r}", url, loss=loss))
                return
            first = 0
            for group in range(meta.num_row_groups):
                rows = int(meta.row_group(group).num_rows)
                if first >= stop:
                    break
                if first + rows > begin:
                    skip = max(begin - first, 0)
                    parts = self._group(parquet, url, group, first, skip, errors)
                    yield from _renumbered(parts, unit.first)
                first += rows

    def _group(
        self, parquet: Any, url: str, group: int, first: int, skip: int, errors: ErrorPolicy
    ) -> Iterator[TextBatch | TokenBatch]:
        try:
            column = parquet.read_row_group(group, columns=[self.column]).column(0)
        except Exception as error:
            rows = int(parquet.metadata.row_group(group).num_rows)
            lost = f"rows {first + skip}-{first + rows - 1}"
            loss = Loss(rows - skip, (lost,))
            reason = f"row group {group} does not decode: {error}"
            errors.handle(SampleError(reason, url, f"row group {group}", loss=loss))
            return
        for begin in range(skip, len(column), self.batch_size):
            part = column.slice(begin, self.batch_size).combine_chunks()
            yield from self._batch(part, url, first + begin, errors)

    def _batch(
        self, part: Any, url: str, first: int, errors: ErrorPolicy
    ) -> Iterator[TextBatch | TokenBatch]:
        import pyarrow as pa

        if pa.types.is_list(part.type) or pa.types.is_large_list(part.type):
            yield from self._tokens(part, url, first, errors)
            return
        numbers: list[int] = []
        texts: list[str] = []
        for number, text in enumerate(part.to_pylist(), start=first):
            if not isinstance(text, str) or not text:
                errors.handle(SampleError("empty document", url, f"row {number}"))
                continue
            numbers.append(number)
            texts.append(text)
        if texts:
            yield TextBatch(numbers, texts)

    def _tokens(self, part: Any, url: str, first: int, errors: ErrorPolicy) -> Iterator[TokenBatch]:
        offsets = np.asarray(part.offsets, dtype=np.int64)
        lengths = np.diff(offsets)
        valid = np.asarray(part.is_valid(), dtype=bool) & (lengths > 0)
        for bad in np.flatnonzero(~valid).tolist():
            errors.handle(SampleError("empty document", url, f"row {first + bad}"))
        values = np.asarray(part.values, dtype=np.int64)
        keep = np.flatnonzero(valid)
        if keep.size == 0:
            return
        if keep.size == len(part):
            tokens, starts = values[offsets[0] : offsets[-1]], offsets - offsets[0]
        else:
            pieces = [values[offsets[i] : offsets[i + 1]] for i in keep.tolist()]
            tokens = np.concatenate(pieces)
            starts = np.zeros(keep.size + 1, dtype=np.int64)
            np.cumsum(lengths[keep], out=starts[1:])
        yield TokenBatch(keep.astype(np.int64) + first, tokens, starts)
