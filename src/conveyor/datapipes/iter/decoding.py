"""Decoding by extension: ``routed_decode`` / ``decode``, for members and whole samples."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from conveyor.datapipes.base import Cursor, IterDataPipe, SourceCursor, StateDict
from conveyor.datapipes.iter.expanding import register_functional
from conveyor.datapipes.iter.tar import split_member_path
from conveyor.formats.decoders import Decoder, DecoderRegistry
from conveyor.formats.errors import ErrorPolicy, OnError, SampleError, as_policy

__all__ = ["Handler", "RoutedDecoder", "extension_extract_fn"]

Handler = Callable[[str, bytes], Any]
"""torch-style handler: ``(extension, raw bytes) -> value``, or None to pass."""


def extension_extract_fn(pathname: str) -> str:
    """The last extension of a path without its dot (torch's default ``key_fn``)."""
    ext = os.path.splitext(pathname)[1]
    return ext[1:] if ext else ext


class RoutedDecoder(IterDataPipe[Any]):
    """Decodes data by extension (functional names: ``routed_decode`` and ``decode``).

    Takes either torch-style ``(path, data)`` pairs, giving ``(path, decoded)`` with the
    extension from ``key_fn(path)``, or WebDataset sample dicts, giving a dict whose
    entries are decoded by their keys (``__dunder__`` entries are kept). ``data`` may be
    bytes or a readable stream (read to its end and closed).

    ``handlers`` are tried first, in order, as in torch (a handler returns None to pass);
    then the `DecoderRegistry` built from ``image`` (an image spec, default ``"torch"``:
    float CHW tensors as torch's default), ``decoders`` (extension -> function) and the
    built-in defaults (``defaults=False`` leaves only the handlers, as torch with
    handlers), or a ready ``registry`` instead of those three. A failure raises
    `SampleError` naming the shard and key, or is counted and the sample skipped under
    ``on_error="skip"``.
    """

    def __init__(
        self,
        datapipe: IterDataPipe[Any],
        *handlers: Handler,
        key_fn: Callable[[str], str] = extension_extract_fn,
        image: str | None = "torch",
        decoders: Mapping[str, Decoder] | None = None,
        defaults: bool = True,
        registry: DecoderRegistry | None = None,
        on_error: OnError | ErrorPolicy = "raise",
    ) -> None:
        if not isinstance(datapipe, IterDataPipe):  # torch takes any iterable here
            from conveyor.datapipes.iter.wrappers import IterableWrapper

            datapipe = IterableWrapper(datapipe, deepcopy=False)
        self.datapipe = datapipe
        self.handlers = handlers
        self.key_fn = key_fn
        if registry is None:
            registry = DecoderRegistry(image if defaults else None, decoders, defaults=defaults)
        self.registry = registry
        self.policy = as_policy(on_error)

    def add_handler(self, *handler: Handler) -> None:
        """Give ``handler`` (several: in order) priority over the existing ones (torch's API)."""
        self.handlers = tuple(handler) + tuple(self.handlers)

    def _value(self, ext: str, data: Any) -> Any:
        if self.handlers:
            raw = data
            if not isinstance(raw, bytes | bytearray | memoryview) and hasattr(raw, "read"):
                raw = raw.read()
                data.close()
                data = raw
            for handler in self.handlers:
                result = handler(ext, bytes(raw))
                if result is not None:
                    return result
        return self.registry.decode_value(ext, data)

    def decode_item(self, item: Any) -> Any:
        """Decode one item; `SampleError` (naming shard and key) when a decoder fails."""
        if isinstance(item, Mapping):
            key = str(item.get("__key__", ""))
            url = str(item.get("__url__", ""))
            current = ""
            try:
                decoded = {}
                for current, value in item.items():
                    decoded[current] = (
                        value if current.startswith("__") else self._value(current, value)
                    )
                return decoded
            except Exception as error:
                reason = f"cannot decode {current!r}: {type(error).__name__}: {error}"
                raise SampleError(reason, url, key) from error
        path, data = item
        try:
            return path, self._value(self.key_fn(path), data)
        except Exception as error:
            url, member = split_member_path(str(path))
            reason = f"cannot decode: {type(error).__name__}: {error}"
            raise SampleError(reason, url, member) from error

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return _DecodeCursor(self, state)


class _DecodeCursor(SourceCursor[Any]):
    def __init__(self, node: RoutedDecoder, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "RoutedDecoder")
        self._decode = node.decode_item
        self._policy = node.policy

    def next(self) -> Any:
        while True:
            try:
                item = self.source.nonblocking_next()
            except StopIteration:
                self._policy.end_of_stream()
                raise
            try:
                value = self._decode(item)
            except SampleError as error:
                self._policy.handle(error)
                continue
            self._policy.passed("RoutedDecoder")
            return value


register_functional("routed_decode", RoutedDecoder)
register_functional("decode", RoutedDecoder)
