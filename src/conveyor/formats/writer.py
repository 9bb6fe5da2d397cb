"""Writing WebDataset-style tar shards: `TarWriter` (one archive) and `ShardWriter` (many).

A sample is a mapping with a ``"__key__"`` and one entry per file: ``{"__key__": "000123",
"jpg": b"...", "cls": 7}`` becomes members ``000123.jpg`` and ``000123.cls``. Values are
encoded by type: bytes as is, str as UTF-8, int/float as text, ndarrays as ``.npy``,
dict/list as JSON, PIL images in the format their extension names, tensors through
``torch.save``. Archives are deterministic (fixed mtime, owner and mode).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any, Self

import numpy as np

from conveyor.storage import is_local, redact_url

__all__ = ["ShardWriter", "TarWriter", "encode_value"]

_PIL_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "bmp": "BMP", "webp": "WEBP"}


def _encode_object(ext: str, value: Any) -> bytes | None:
    if hasattr(value, "save") and hasattr(value, "mode"):  # a PIL image
        buffer = io.BytesIO()
        value.save(buffer, format=_PIL_FORMATS.get(ext.rsplit(".", 1)[-1], "PNG"))
        return buffer.getvalue()
    if type(value).__module__.startswith("torch"):
        import torch

        buffer = io.BytesIO()
        torch.save(value, buffer)
        return buffer.getvalue()
    return None


def encode_value(ext: str, value: Any) -> bytes:
    """The bytes stored for ``value`` under extension ``ext``; TypeError if unsupported."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool | int | float | np.integer | np.floating):
        return str(value).encode()
    if isinstance(value, np.ndarray):
        buffer = io.BytesIO()
        np.save(buffer, value, allow_pickle=False)
        return buffer.getvalue()
    if isinstance(value, dict | list | tuple):
        return json.dumps(value).encode("utf-8")
    encoded = _encode_object(ext, value)
    if encoded is None:
        raise TypeError(f"cannot encode a {type(value).__name__} for extension {ext!r}")
    return encoded


def _open_output(url: str) -> IO[bytes]:
    if is_local(url):
        path = url.removeprefix("file://")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return open(path, "wb")
    try:
        import fsspec
    except ImportError as error:
        shown = redact_url(url)
        raise ImportError(f"writing {shown!r} needs: pip install conveyor[remote]") from error
    stream: IO[bytes] = fsspec.open(url, "wb").open()
    return stream


class TarWriter:
    """Writes samples into one tar archive at ``url`` (a local path or an fsspec URL).

    ``bytes_written`` counts the archive bytes so far (headers and padding included).
    Close it (or use ``with``) to write the end-of-archive blocks.
    """

    def __init__(self, url: str, mtime: float = 0.0) -> None:
        self.url = url
        self._stream = _open_output(url)
        self._tar = tarfile.open(  # noqa: SIM115 - closed by close()
            fileobj=self._stream, mode="w|", format=tarfile.PAX_FORMAT
        )
        self._mtime = mtime
        self.bytes_written = 0
        self.samples = 0

    @staticmethod
    def encode(sample: Mapping[str, Any]) -> tuple[str, list[tuple[str, bytes]]]:
        """``(key, [(member name, bytes), ...])`` for a sample; ValueError without a key."""
        key = sample.get("__key__")
        if not isinstance(key, str) or not key:
            raise ValueError("every sample needs a non-empty str '__key__'")
        if "." in key.rsplit("/", 1)[-1]:
            raise ValueError(f"sample key {key!r} must not contain '.' in its basename")
        members = [
            (f"{key}.{ext}", encode_value(ext, value))
            for ext, value in sample.items()
            if not ext.startswith("__")
        ]
        return key, members

    @staticmethod
    def member_bytes(members: list[tuple[str, bytes]]) -> int:
        """Archive bytes that ``members`` take (a 512-byte header each, data padded)."""
        return sum(512 + len(data) + (-len(data) % 512) for _, data in members)

    def write_encoded(self, members: list[tuple[str, bytes]]) -> None:
        """Append already encoded members (see `encode`)."""
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(self._mtime)
            info.mode = 0o444
            self._tar.addfile(info, io.BytesIO(data))
        self.bytes_written += self.member_bytes(members)
        self.samples += 1

    def write(self, sample: Mapping[str, Any]) -> None:
        """Append one sample."""
        self.write_encoded(self.encode(sample)[1])

    def close(self) -> None:
        """Finish the archive and close the output."""
        try:
            self._tar.close()
        finally:
            self._stream.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ShardWriter:
    """Writes samples across numbered shards, starting a new one when a limit would be passed.

    Args:
        pattern: shard URL with one ``%d``-style field, e.g. ``"out/train-%06d.tar"``.
        max_count: samples per shard at most.
        max_bytes: archive bytes per shard at most (a single larger sample gets a shard
            of its own).
        start_index: number of the first shard.

    ``shards`` lists the URLs written so far; ``total`` counts samples. Use as a context
    manager, or call ``close()``.
    """

    def __init__(
        self,
        pattern: str,
        max_count: int = 100_000,
        max_bytes: int = 3_000_000_000,
        start_index: int = 0,
    ) -> None:
        if max_count < 1 or max_bytes < 1:
            raise ValueError("ShardWriter: max_count and max_bytes must be at least 1")
        try:
            pattern % 0
        except TypeError:
            raise ValueError(
                f"ShardWriter: pattern {pattern!r} needs one %d field, e.g. 'out-%06d.tar'"
            ) from None
        self.pattern = pattern
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.index = start_index
        self.shards: list[str] = []
        self.total = 0
        self._writer: TarWriter | None = None

    def _next_shard(self) -> TarWriter:
        if self._writer is not None:
            self._writer.close()
        url = self.pattern % self.index
        self.index += 1
        self._writer = TarWriter(url)
        self.shards.append(url)
        return self._writer

    def write(self, sample: Mapping[str, Any]) -> None:
        """Append one sample, to the current shard or to a new one."""
        _, members = TarWriter.encode(sample)
        size = TarWriter.member_bytes(members)
        writer = self._writer
        if (
            writer is None
            or writer.samples >= self.max_count
            or (writer.samples and writer.bytes_written + size > self.max_bytes)
        ):
            writer = self._next_shard()
        writer.write_encoded(members)
        self.total += 1

    def close(self) -> None:
        """Finish the current shard."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
