"""Token files: flat arrays of token ids, with an optional index of document boundaries.

The layout is the one nanoGPT- and Megatron-style pipelines write: ``NAME.bin`` holds the
token ids of every document back to back (``uint16`` for vocabularies under 65,536, else
``uint32``), and ``NAME.idx``, when present, says where each document starts (Megatron's
``MMIDIDX`` index: header, version 1, dtype code, counts, int32 lengths, int64 byte
pointers, int64 document indices). Without an index the file is one stream of tokens; a
``separator`` token (nanoGPT appends the end-of-text id after every document) splits it
into documents. Local files are memory-mapped; remote ones read by byte ranges through
`conveyor.storage` (timeouts, retries).
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import numpy as np
from numpy.typing import DTypeLike, NDArray

from conveyor.formats.errors import ErrorPolicy, SampleError
from conveyor.storage import get_filesystem, is_local, open_url
from conveyor.text.documents import TokenBatch, Unit

__all__ = ["TokenFileWriter", "TokenFiles", "read_index"]

INDEX_HEADER = b"MMIDIDX\x00\x00"
_CODES: dict[int, type[np.integer[Any]]] = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    8: np.uint16,
}
_CODE_OF = {np.dtype(t): c for c, t in _CODES.items()} | {np.dtype(np.uint32): 4}
_BATCH_TOKENS = 1 << 20  # tokens per batch handed to the packer


def _prefix(path: str) -> str:
    return path[: -len(".bin")] if path.endswith(".bin") else path


class TokenFileWriter:
    """Writes ``PREFIX.bin`` and (``index=True``) ``PREFIX.idx`` for documents added in order.

    ``dtype``: ``uint16`` (ids < 65,536) or ``uint32`` (stored with Megatron's int32 code).
    A token id that does not fit is a ValueError, never a silent wrap.
    """

    def __init__(self, prefix: str, dtype: DTypeLike = np.uint16, *, index: bool = True) -> None:
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.uint16), np.dtype(np.uint32)):
            raise ValueError(f"TokenFileWriter dtype must be uint16 or uint32, got {self.dtype}")
        self.prefix = _prefix(prefix)
        self._index = index
        self._bin = open(self.prefix + ".bin", "wb")  # noqa: SIM115 (closed by close())
        self._lengths: list[int] = []
        self._limit = int(np.iinfo(self.dtype).max)
        if self.dtype == np.dtype(np.uint32):
            self._limit = int(np.iinfo(np.int32).max)

    def add(self, tokens: Sequence[int] | NDArray[np.integer]) -> None:
        """Append one document."""
        array = np.asarray(tokens)
        if array.ndim != 1:
            raise ValueError(f"a document is a 1-D sequence of token ids, got shape {array.shape}")
        if array.size and (int(array.min()) < 0 or int(array.max()) > self._limit):
            raise ValueError(
                f"token ids must be in [0, {self._limit}] for dtype {self.dtype}, got "
                f"[{int(array.min())}, {int(array.max())}]; write uint32 files for this vocabulary"
            )
        self._bin.write(array.astype(self.dtype, copy=False).tobytes())
        self._lengths.append(int(array.size))

    def close(self) -> None:
        if self._bin.closed:
            return
        self._bin.close()
        if self._index:
            _write_index(self.prefix + ".idx", self.dtype, self._lengths)

    def __enter__(self) -> TokenFileWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _write_index(path: str, dtype: np.dtype[Any], lengths: list[int]) -> None:
    sizes = np.asarray(lengths, dtype=np.int32)
    pointers = np.zeros(sizes.size, dtype=np.int64)
    if sizes.size > 1:
        np.cumsum(sizes[:-1].astype(np.int64) * dtype.itemsize, out=pointers[1:])
    documents = np.arange(sizes.size + 1, dtype=np.int64)
    with open(path, "wb") as out:
        out.write(INDEX_HEADER)
        out.write(struct.pack("<Q", 1))
        out.write(struct.pack("<B", _CODE_OF[dtype]))
        out.write(struct.pack("<Q", sizes.size))
        out.write(struct.pack("<Q", documents.size))
        out.write(sizes.tobytes())
        out.write(pointers.tobytes())
        out.write(documents.tobytes())


def read_index(
    url: str, storage_options: dict[str, Any] | None = None
) -> tuple[np.dtype[Any], NDArray[np.int64], NDArray[np.int64]]:
    """``(dtype, starts, lengths)`` of an ``.idx`` file: each document's first token (in
    tokens, not bytes) and length. ValueError when it is no Megatron ``MMIDIDX`` index."""
    with open_url(url, storage_options) as stream:
        data = stream.read()
    if data[:9] != INDEX_HEADER or len(data) < 34:
        raise ValueError(f"{url}: not a token index (no MMIDIDX header)")
    version, code, count, _documents = struct.unpack("<QBQQ", data[9:34])
    if version != 1 or code not in _CODES:
        raise ValueError(f"{url}: index version {version}, dtype code {code} not supported")
    dtype = np.dtype(_CODES[code])
    lengths = np.frombuffer(data, np.int32, count, 34).astype(np.int64)
    pointers = np.frombuffer(data, np.int64, count, 34 + 4 * count)
    return dtype, pointers // dtype.itemsize, lengths


class _Tokens:
    """One ``.bin`` file's tokens: memory-mapped when local, ranged reads when remote."""

    def __init__(self, url: str, dtype: np.dtype[Any], storage_options: dict[str, Any] | None):
        self.url, self.dtype, self._options = url, dtype, storage_options
        self._map: NDArray[Any] | None = None

    def __len__(self) -> int:
        if is_local(self.url):
            return len(self._mapped())
        return get_filesystem(self.url, self._options).size(self.url) // self.dtype.itemsize

    def _mapped(self) -> NDArray[Any]:
        if self._map is None:
            path = self.url.removeprefix("file://")
            if os.path.getsize(path) == 0:
                self._map = np.zeros(0, self.dtype)
            else:
                self._map = np.memmap(path, dtype=self.dtype, mode="r")
        return self._map

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_map": None}  # workers map the file themselves

    def slice(self, start: int, stop: int) -> NDArray[Any]:
        if is_local(self.url):  # a plain view: memmap's subclass hooks cost per slice
            return np.asarray(self._mapped()[start:stop])
        size = self.dtype.itemsize
        with open_url(self.url, self._options) as stream:
            stream.seek(start * size)
            data = stream.read((stop - start) * size)
        return np.frombuffer(data, self.dtype)


class TokenFiles:
    """Pre-tokenized documents in token files: a `DocumentSource` for `PackedText`.

    Args:
        paths: ``.bin`` files or their prefixes, local or remote URLs.
        dtype: the token type of files without an index (default ``uint16``); indexed
            files say their own.
        separator: for files without an index, the token that ends each document
            (nanoGPT's end-of-text id); None: the file is one stream of tokens.
        unit_tokens: about how many tokens one unit of work holds (indexed files: whole
            documents of at least this many tokens per unit).
        storage_options: passed to fsspec for remote URLs.
    """

    def __init__(
        self,
        paths: str | Sequence[str],
        *,
        dtype: DTypeLike = np.uint16,
        separator: int | None = None,
        unit_tokens: int = 1 << 22,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        listed = [paths] if isinstance(paths, str) else list(paths)
        if not listed:
            raise ValueError("TokenFiles needs at least one file")
        if unit_tokens < 1:
            raise ValueError(f"unit_tokens must be >= 1, got {unit_tokens}")
        self.prefixes = [_prefix(p) for p in listed]
        self.separator = separator
        self.unit_tokens = unit_tokens
        self.storage_options = storage_options
        self._dtype = np.dtype(dtype)
        self._files: dict[str, tuple[_Tokens, NDArray[np.int64] | None, NDArray[np.int64] | None]]
        self._files = {}
        self._units: list[Unit] | None = None

    def _file(
        self, prefix: str
    ) -> tuple[_Tokens, NDArray[np.int64] | None, NDArray[np.int64] | None]:
        found = self._files.get(prefix)
        if found is None:
            fs = get_filesystem(prefix + ".idx", self.storage_options)
            try:
                fs.size(prefix + ".idx")
                has_index = True
            except FileNotFoundError:
                has_index = False
            if has_index:
                dtype, starts, lengths = read_index(prefix + ".idx", self.storage_options)
                found = (_Tokens(prefix + ".bin", dtype, self.storage_options), starts, lengths)
            else:
                found = (_Tokens(prefix + ".bin", self._dtype, self.storage_options), None, None)
            self._files[prefix] = found
        return found

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_files": {}}  # workers read indices on first use

    def units(self) -> list[Unit]:
        if self._units is None:
            self._units = [u for prefix in self.prefixes for u in self._units_of(prefix)]
        return self._units

    def _units_of(self, prefix: str) -> Iterator[Unit]:
        tokens, starts, lengths = self._file(prefix)
        if starts is None or lengths is None:
            total = len(tokens)
            for first in range(0, total, self.unit_tokens):
                stop = min(total, first + self.unit_tokens)
                yield Unit(prefix, first, stop, stop - first)
            return
        ends = np.cumsum(lengths)
        first = 0
        while first < lengths.size:  # whole documents, at least unit_tokens of them
            goal = (ends[first - 1] if first else 0) + self.unit_tokens
            stop = min(int(np.searchsorted(ends, goal)) + 1, int(lengths.size))
            yield Unit(prefix, first, stop, int(ends[stop - 1] - (ends[first - 1] if first else 0)))
            first = stop

    def identity(self) -> str:
        text = f"tokens\x00{self.prefixes}\x00{self.separator}\x00{self.unit_tokens}"
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def read(self, unit: Unit, start: int, errors: ErrorPolicy) -> Iterator[TokenBatch]:
        try:
            tokens, starts, lengths = self._file(unit.url)
        except (OSError, ValueError) as error:
            errors.handle(SampleError(f"unreadable token file: {error}", unit.url))
            return
        if starts is None or lengths is None:
            yield from self._read_flat(tokens, unit, start)
            return
        stop = int(lengths.size if unit.stop is None else unit.stop)
        first = unit.first + start
        while first < stop:
            end = first + 1  # documents up to about _BATCH_TOKENS tokens
            limit = starts[first] + _BATCH_TOKENS
            end = max(end, min(stop, int(np.searchsorted(starts, limit, side="right"))))
            begin = int(starts[first])
            offsets = np.empty(end - first + 1, dtype=np.int64)
            offsets[:-1] = starts[first:end] - begin
            offsets[-1] = int(starts[end - 1] + lengths[end - 1]) - begin
            data = tokens.slice(begin, begin + int(offsets[-1]))
            numbers = np.arange(first - unit.first, end - unit.first, dtype=np.int64)
            yield TokenBatch(numbers, data, offsets)
            first = end

    def _read_flat(self, tokens: _Tokens, unit: Unit, start: int) -> Iterator[TokenBatch]:
        """A range of a file without index: one document, or documents ending at each
        ``separator`` (numbered within the range)."""
        stop = unit.stop if unit.stop is not None else len(tokens)
        data = tokens.slice(unit.first, stop)
        if self.separator is None:
            bounds = np.array([0, data.size], dtype=np.int64)
        else:
            ends = np.flatnonzero(data == self.separator).astype(np.int64) + 1
            bounds = np.unique(np.concatenate(([0], ends, [data.size])))
        count = bounds.size - 1
        for first in range(start, count, 4096):
            end = min(count, first + 4096)
            begin = int(bounds[first])
            offsets = bounds[first : end + 1] - begin
            numbers = np.arange(first, end, dtype=np.int64)
            yield TokenBatch(numbers, data[begin : int(bounds[end])], offsets)
