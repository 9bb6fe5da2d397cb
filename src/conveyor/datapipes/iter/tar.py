"""Tar shards: ``load_from_tar`` (members of each archive) and ``webdataset`` (samples).

Both resume without replaying: ``load_from_tar`` saves the byte offset of the next member
header and seeks there; ``webdataset`` saves the state its input had just before the
first member of the next sample, so that member is simply read again.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from typing import IO, Any, Self

from conveyor.datapipes.base import Cursor, IterDataPipe, StateDict, check_version, sub_state
from conveyor.datapipes.iter.expanding import ExpandingCursor, Expansion, register_functional
from conveyor.datapipes.iter.files import FileOpener
from conveyor.formats.errors import ErrorPolicy, OnError, SampleError, as_policy
from conveyor.formats.grouping import SampleBuilder, split_name
from conveyor.formats.loss_estimates import Loss
from conveyor.formats.progress import ShardProgress
from conveyor.formats.tar import (
    DEFAULT_MAX_MEMBER_BYTES,
    TarCorruption,
    TarMember,
    TarReadError,
    TarTruncation,
    open_archive,
    read_members,
    scan_rest,
)

__all__ = ["TarArchiveLoader", "TarMemberPath", "WebDataset"]

_ARCHIVE_SUFFIXES = (".tar/", ".tar.gz/", ".tgz/")


class TarMemberPath(str):
    """``"<archive url>/<member name>"`` (torch's path form), remembering both parts and
    the byte ``offset`` of the member's first header (-1 when unknown)."""

    url: str
    member: str
    offset: int

    def __new__(cls, url: str, member: str, offset: int = -1) -> Self:
        path = super().__new__(cls, f"{url}/{member}")
        path.url = url
        path.member = member
        path.offset = offset
        return path

    def __getnewargs__(self) -> tuple[str, str, int]:  # type: ignore[override]
        return (self.url, self.member, self.offset)


def split_member_path(path: str) -> tuple[str, str]:
    """``(archive url, member name)`` of a member path; ``("", path)`` if not recognised."""
    if isinstance(path, TarMemberPath):
        return path.url, path.member
    lowered = path.lower()
    for suffix in _ARCHIVE_SUFFIXES:
        cut = lowered.rfind(suffix)
        if cut >= 0:
            return path[: cut + len(suffix) - 1], path[cut + len(suffix) :]
    return "", path


class TarArchiveLoader(IterDataPipe[tuple[str, Any]]):
    """Yields ``(path, member)`` for every file in each archive (functional: ``load_from_tar``).

    Same as torch's TarArchiveLoader: the input yields ``(archive path, binary stream)``
    (e.g. from ``open_files(mode="b")``); each output path is ``archive_path/member_name``
    (a `TarMemberPath`); the member comes as a ``BytesIO`` (or ``bytes`` with
    ``stream=False``). gzip archives (``.tar.gz``, ``.tgz``) are decompressed on the fly.
    Each archive's stream is closed when it is done. A corrupt header, a truncated member,
    an empty archive or one without tar's end-of-archive blocks (cut short) raises
    `SampleError` with the archive URL and offset, or, under ``on_error="skip"``, the rest
    of that archive is skipped and counted in samples (WebDataset keys): after a corrupt
    header the rest is read to find its keys; otherwise the count is an estimate.

    Bounded: a member over ``max_member_bytes`` (default 1 GiB) is never read into memory;
    it raises `SampleError`, or under ``"skip"`` its sample is counted and dropped (the
    other members of that sample too, by ``webdataset``) and the archive read on. A
    malformed header (pax records, GNU long names, numbers: see
    `conveyor.formats.tar_headers`) ends the archive with an error in bounded time.

    State: the input's state before the current archive and the offset of the next
    member; resuming seeks there (O(1) on seekable streams, local or remote).
    """

    def __init__(
        self,
        datapipe: IterDataPipe[tuple[str, IO[bytes]]],
        mode: str = "r:*",
        length: int = -1,
        *,
        stream: bool = True,
        on_error: OnError | ErrorPolicy = "raise",
        max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
    ) -> None:
        if not mode.startswith("r"):
            raise ValueError(f"TarArchiveLoader reads archives only; mode {mode!r} is invalid")
        if max_member_bytes < 0:
            raise ValueError(f"max_member_bytes must be >= 0, got {max_member_bytes}")
        self.max_member_bytes = max_member_bytes
        self.datapipe = datapipe
        self.mode = mode
        self.length = length
        self.stream = stream
        self.policy = as_policy(on_error)

    def _make_cursor(self, state: StateDict | None) -> Cursor[tuple[str, Any]]:
        return _TarCursor(self, state)

    def can_reread(self) -> bool:
        """Members can be read again when this node opens the archives itself."""
        return isinstance(self.datapipe, FileOpener) and "b" in self.datapipe.mode

    def reread_members(self, url: str, offsets: Sequence[int]) -> Iterator[Iterator[Any]]:
        """For each of ``offsets`` (ascending) of archive ``url``: its ``(path, data)``
        members from there on, read through one opened stream (closed at the end)."""
        assert isinstance(self.datapipe, FileOpener)
        raw = self.datapipe.reopen(url)
        try:
            stream = open_archive(raw, url)
            for offset in offsets:
                members = read_members(stream, url, offset, self.max_member_bytes)
                yield (self._output(url, member) for member in members if not member.refused)
        finally:
            raw.close()

    def _output(self, url: str, member: TarMember) -> tuple[TarMemberPath, Any]:
        data = io.BytesIO(member.data) if self.stream else member.data
        return TarMemberPath(url, member.name, member.offset), data

    def __len__(self) -> int:
        if self.length >= 0:
            return self.length
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class _TarCursor(ExpandingCursor[tuple[str, Any]]):
    def __init__(self, node: TarArchiveLoader, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "TarArchiveLoader", node.policy)
        self._node = node
        self._max_member_bytes = node.max_member_bytes

    def expand(self, item: Any, position: Any) -> Expansion[tuple[str, Any]]:
        url, raw = item
        if position is None:  # a shard begun by another consumer starts where it stopped
            position = getattr(url, "start", 0)
        url = str(url)
        self.policy.cut_short.discard(url)
        progress = ShardProgress(url, int(position or 0), self.policy.history)
        stream = raw
        try:
            stream = open_archive(raw, url)
            for member in read_members(stream, url, progress.start, self._max_member_bytes):
                progress.saw(member)
                if member.refused:
                    self._refuse(url, member)
                    continue
                yield self._node._output(url, member), member.end
        except SampleError as error:
            counted = self._counted(error, progress, raw, stream)
            if counted is error:
                raise
            raise counted from error
        except Exception as error:  # opening a gzip stream, seeking to the resume offset
            failed = TarReadError(
                f"cannot read archive: {type(error).__name__}: {error}",
                url,
                offset=progress.position,
            )
            raise self._counted(failed, progress, raw, stream) from error
        progress.finished(_size_of(raw))

    def _refuse(self, url: str, member: TarMember) -> None:
        """A member that was not read (too large): raise, or count its sample and have the
        grouping stage drop the rest of it."""
        parts = split_name(member.name)
        key = parts[0] if parts else ""
        loss = Loss(1, (key,) if key else ())
        self.policy.handle(SampleError(member.refused, url, key, member.offset, loss))
        self.policy.dropped.add((url, key))

    def _counted(
        self, error: SampleError, progress: ShardProgress, raw: Any, stream: Any
    ) -> SampleError:
        """``error`` with the samples it cost (worked out only when they will be skipped).

        The sample in progress is dropped by ``webdataset`` (``cut_short``) unless the
        failure was in a member of a later sample, which shows it was complete."""
        if self.policy.on_error != "skip" or error.loss is not None:
            return error
        if not progress.completes_current(error.key):
            self.policy.cut_short.add(error.url)
        if isinstance(error, TarCorruption):
            try:
                loss = progress.loss_scanned(scan_rest(stream, error.url))
            except Exception:  # the rest cannot be read either: estimate it
                loss = progress.loss_estimated(_bytes_left(raw, stream, error.offset))
        elif isinstance(error, TarTruncation):
            loss = progress.loss_estimated(None, error.key)  # the bytes say nothing
        else:
            loss = progress.loss_estimated(_bytes_left(raw, stream, error.offset), error.key)
        return type(error)(error.reason, error.url, error.key, error.offset, loss)

    def release(self, item: Any) -> None:
        item[1].close()


def _size_of(raw: Any) -> int | None:
    """The byte size of an open stream, if it can say (local file, remote reader)."""
    size = getattr(raw, "size", None)
    if isinstance(size, int):
        return size
    try:
        return os.fstat(raw.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        return None


def _bytes_left(raw: Any, stream: Any, offset: int | None) -> int | None:
    """Bytes of the archive after ``offset`` (None for compressed archives or unknown size)."""
    size = _size_of(raw)
    if size is None or offset is None or stream is not raw:
        return None
    return max(0, size - offset)


class WebDataset(IterDataPipe[dict[str, Any]]):
    """Groups ``(path, data)`` members into WebDataset samples (functional: ``webdataset``).

    Consecutive members with the same key form ``{"__key__": key, "__url__": archive,
    ext: data, ...}`` with the WebDataset library's rules (`conveyor.formats.grouping`):
    the key is the member path inside the archive up to the basename's first dot, the
    extension is the rest, without a leading dot. (torchdata's ``webdataset`` used
    ``".ext"`` keys and put the archive path into ``__key__``; this follows the library
    whose shards it reads.) A repeated extension raises `SampleError`, or is skipped and
    counted under ``on_error="skip"``; with the same policy as ``load_from_tar``, the last
    sample of a shard cut short by a skipped error is dropped too (it may be incomplete).
    An error raised from the input is raised after the last sample of the shards that
    ended before it (a shard's last sample is complete when the shard ended cleanly).
    """

    def __init__(
        self,
        source_datapipe: IterDataPipe[tuple[str, Any]],
        *,
        on_error: OnError | ErrorPolicy = "raise",
    ) -> None:
        self.source_datapipe = source_datapipe
        self.policy = as_policy(on_error)

    def _make_cursor(self, state: StateDict | None) -> Cursor[dict[str, Any]]:
        return _GroupCursor(self, state)

    def can_reread(self) -> bool:
        """A sample is read again from ``(archive url, offset of its first member)``."""
        source = self.source_datapipe
        return isinstance(source, TarArchiveLoader) and source.can_reread()

    def reread(self, positions: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
        """The samples at ``positions``: each archive opened once, read in offset order."""
        source = self.source_datapipe
        assert isinstance(source, TarArchiveLoader)
        found: dict[tuple[str, int], dict[str, Any]] = {}
        by_url: dict[str, list[int]] = {}
        for url, offset in positions:
            by_url.setdefault(url, []).append(offset)
        for url, offsets in by_url.items():
            ordered = sorted(set(offsets))
            for offset, members in zip(ordered, source.reread_members(url, ordered), strict=True):
                found[(url, offset)] = _first_sample(members, url, offset)
        return [dict(found[(url, offset)]) for url, offset in positions]


def _first_sample(members: Iterator[tuple[str, Any]], url: str, offset: int) -> dict[str, Any]:
    """The sample whose first member starts at ``offset`` (a changed archive: SampleError)."""
    builder = SampleBuilder()
    for path, data in members:
        _, member = split_member_path(path)
        finished = builder.add(url, member, data)
        if finished is not None:
            return finished
    last = builder.flush()
    if last is None:
        raise TarReadError("no sample at this offset any more (was it rewritten?)", url, "", offset)
    return last


class _GroupCursor(Cursor[dict[str, Any]]):
    def __init__(self, node: WebDataset, state: StateDict | None) -> None:
        if state is not None:
            check_version(state, 1, "WebDataset")
        self.source = node.source_datapipe
        self.policy = node.policy
        self._builder = SampleBuilder()
        self.source._restart(sub_state(state, "source"))
        self._start: StateDict | None = None  # input state before the sample in progress
        self._error: SampleError | None = None  # raised after the sample delivered before it
        self._current_at: tuple[str, int] | None = None  # position of the sample in progress
        self._returned_at: tuple[str, int] | None = None  # position of the last sample returned

    def next(self) -> dict[str, Any]:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        builder = self._builder
        while True:
            before = self.source._held_state()
            try:
                path, data = self.source.nonblocking_next()
            except SampleError as error:
                finished = self._finished_before(error)
                if finished is None:
                    raise
                self._error = error
                return finished
            except StopIteration:
                last = self._complete(builder.flush())
                if last is None:
                    self.policy.end_of_stream()
                    raise
                self.policy.passed("WebDataset")
                self._returned_at = self._current_at
                return last
            url, member = split_member_path(path)
            started, began_at = builder.current, self._current_at
            try:
                finished = builder.add(url, member, data)
            except SampleError as error:
                self.policy.handle(error)
                continue
            if builder.current is not None and builder.current is not started:
                self._start = before  # resuming re-reads the member that began this sample
                self._current_at = _position_of(path)
            finished = self._complete(finished)
            if finished is not None:
                self.policy.passed("WebDataset")
                self._returned_at = began_at
                return finished

    def _finished_before(self, error: SampleError) -> dict[str, Any] | None:
        """The sample in progress if it is complete: its shard ended before ``error``'s, or
        the error names a later sample of the same shard."""
        current = self._builder.current
        if current is None:
            return None
        same_shard = current["__url__"] == error.url
        if same_shard and (not error.key or error.key == current["__key__"]):
            return None
        self._builder.flush()
        self.policy.passed("WebDataset")
        self._returned_at = self._current_at
        return current

    def item_position(self) -> tuple[str, int] | None:
        return self._returned_at

    def _complete(self, sample: dict[str, Any] | None) -> dict[str, Any] | None:
        """``sample``, unless it is the last one of a shard that was cut short, or lost a
        member (both counted already)."""
        if sample is None:
            return None
        dropped = self.policy.dropped
        if dropped and (sample["__url__"], sample["__key__"]) in dropped:
            dropped.discard((sample["__url__"], sample["__key__"]))
            return None
        cut = self.policy.cut_short
        if not cut or sample["__url__"] not in cut:
            return sample
        cut.discard(sample["__url__"])
        return None

    def state(self) -> StateDict:
        in_progress = self._builder.current is not None and self._start is not None
        source = self._start if in_progress else self.source._held_state()
        return {"version": 1, "source": source}

    def close(self) -> None:
        self._builder.flush()
        self.source.close()


def _position_of(path: str) -> tuple[str, int] | None:
    offset = getattr(path, "offset", -1)
    return (path.url, offset) if isinstance(path, TarMemberPath) and offset >= 0 else None


register_functional("load_from_tar", TarArchiveLoader)
register_functional("webdataset", WebDataset)
