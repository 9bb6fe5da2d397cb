"""Shards as the unit of work: `ShardLister` (shuffle, split across consumers), `TarShards`.

Every consumer (rank x worker) reads whole shards: the shard list is shuffled with a
seed all consumers share, then consumer ``c`` of ``n`` takes shards ``c, c + n, ...``.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Self

from conveyor.datapipes.base import Cursor, IterDataPipe, SourceCursor, StateDict, check_version
from conveyor.datapipes.iter import shard_state
from conveyor.datapipes.iter.combinatorics import Shuffler
from conveyor.datapipes.iter.decoding import RoutedDecoder
from conveyor.datapipes.iter.files import FileOpener, UrlWithNext
from conveyor.datapipes.iter.shard_state import is_flat
from conveyor.datapipes.iter.sharding import SHARDING_PRIORITIES, check_shard, combine_groups
from conveyor.datapipes.iter.tar import TarArchiveLoader, WebDataset
from conveyor.datapipes.rng import SplitMix64, draw_seed
from conveyor.distributed import world_and_rank
from conveyor.engine.workers.worker_info import get_worker_info
from conveyor.formats.decoders import DecoderRegistry
from conveyor.formats.errors import ErrorPolicy, OnError, SampleError, as_policy
from conveyor.formats.tar import DEFAULT_MAX_MEMBER_BYTES
from conveyor.state.elastic import Pending, consumer_progress, fresh_progress, is_elastic
from conveyor.storage import (
    DEFAULT_BLOCK_BYTES,
    RemoteOptions,
    ShardCache,
    expand_braces,
    resolve_urls,
)
from conveyor.storage.filesystems import has_glob, prepare_remote
from conveyor.torch_compat import torch_worker_info

__all__ = ["ShardLister", "ShardURL", "TarShards", "consumer_slot"]

_MIX = 0x9E3779B97F4A7C15


def _worker() -> tuple[int, int, int | None]:
    """``(num_workers, worker_id, shared epoch seed)`` of this worker, or ``(1, 0, None)``."""
    info: Any = get_worker_info()
    if info is None:  # a worker of torch's own DataLoader?
        info = torch_worker_info()
    if info is None:
        return 1, 0, None
    return int(info.num_workers), int(info.id), int(info.seed) - int(info.id)


def consumer_slot() -> tuple[int, int]:
    """``(consumers, this consumer)`` from torch.distributed (if initialised) x workers."""
    world, rank = world_and_rank()
    workers, worker, _ = _worker()
    return world * workers, rank * workers + worker


class ShardLister(IterDataPipe[str]):
    """Yields this consumer's shard URLs, shuffled per epoch if asked (a source node).

    ``urls``: a URL, a list, brace ranges (``shard-{000..099}.tar``) or globs. Globs are
    listed once per job: by a `conveyor.DataLoader` in its main process before the
    workers start (on rank 0, for every rank, under torch.distributed), and handed to the
    workers with the graph; iterated on its own, at the first pull. Workers never list.

    Sharding: shardable (the RFC's ``is_shardable``); ``apply_sharding(n, i, group)`` as
    for ``sharding_filter`` (DISTRIBUTED and MULTIPROCESSING groups combine). If nothing
    applied sharding, it is taken from ``torch.distributed`` and the worker info when a
    pass starts. Warns when there are fewer shards than consumers (some get nothing).

    Shuffling: ``shuffle`` permutes the shards with a seed shared by all consumers: the
    seed of ``set_seed`` (as ``apply_random_seed`` gives it; used once), else the epoch's
    base seed of the DataLoader worker, else ``seed`` plus the pass number, else one
    drawn from torch's generator. ``set_shuffle`` turns it on or off.

    Read-ahead: each URL it yields names this consumer's next shard (`UrlWithNext`), so
    that ``open_files`` starts reading it while the current one is read (remote objects,
    unless ``RemoteOptions(read_ahead=0)`` or ``prepare_next=False``): a shard boundary
    costs no round trip. The hint travels with the item, so thread workers each keep theirs.

    State: an elastic progress (`conveyor.state.elastic`): the pass's shard order (its
    seed), what was left to read when the pass began, this consumer's slot and how many
    of its shards it has handed out. A progress merged from the checkpoints of another
    split is split again here (shards begun elsewhere come as `ShardURL` with their start).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        shuffle: bool = False,
        seed: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote: RemoteOptions | None = None,
        prepare_next: bool = True,
    ) -> None:
        self.urls: list[str] = [urls] if isinstance(urls, str) else [str(url) for url in urls]
        if not self.urls:
            raise ValueError("ShardLister: no shard URLs given")
        self.shuffle_shards = shuffle
        self.seed = seed
        self.storage_options = dict(storage_options or {})
        self.remote = remote
        self.prepare_next = prepare_next
        self.groups: dict[int, tuple[int, int]] = {}
        self._set_seed: int | None = None
        self._passes = 0
        self._listed: list[str] | None = None  # the globs' result, once per job

    # -- listing (once per job: `conveyor.datapipes.loading.list_once`)

    def listing_wanted(self) -> bool:
        """Whether the URLs hold globs (a listing to make once and hand out)."""
        return any(has_glob(url) for entry in self.urls for url in expand_braces(entry))

    def prepare_remote(self) -> None:
        """Make the URLs' file systems here (the main process, before workers fork)."""
        prepare_remote(
            [url for entry in self.urls for url in expand_braces(entry)],
            self.storage_options,
            self.remote,
        )

    def list_now(self) -> list[str]:
        """The concrete shard URLs, listed here unless a listing was handed over."""
        if self._listed is None:
            self._listed = resolve_urls(self.urls, self.storage_options, self.remote)
        return list(self._listed)

    def adopt_listing(self, urls: Sequence[str]) -> None:
        """Use ``urls`` (listed elsewhere: the main process, rank 0) instead of listing."""
        self._listed = [str(url) for url in urls]

    def is_shardable(self) -> bool:
        return True

    def apply_sharding(
        self,
        num_of_instances: int,
        instance_id: int,
        sharding_group: int = SHARDING_PRIORITIES.DEFAULT,
    ) -> None:
        """Make this node consumer ``instance_id`` of ``num_of_instances`` (within a group)."""
        check_shard(num_of_instances, instance_id)
        self.groups[int(sharding_group)] = (num_of_instances, instance_id)

    def set_shuffle(self, shuffle: bool = True) -> Self:
        """Turn shard shuffling on or off for later passes."""
        self.shuffle_shards = shuffle
        return self

    def set_seed(self, seed: int) -> Self:
        """Seed the next pass's shard order (give every consumer the same seed)."""
        self._set_seed = seed
        return self

    def _slot(self) -> tuple[int, int]:
        if not self.groups:
            return consumer_slot()
        return combine_groups(self.groups)

    def _pass_seed(self) -> int:
        self._passes += 1
        if self._set_seed is not None:
            seed, self._set_seed = self._set_seed, None
            return seed
        _, _, shared = _worker()
        if shared is not None:
            return shared ^ (self.seed or 0)
        if self.seed is not None:
            return (self.seed + (self._passes - 1) * _MIX) & ((1 << 63) - 1)
        return draw_seed()

    def _make_cursor(self, state: StateDict | None) -> Cursor[str]:
        return _ShardCursor(self, state)


class ShardURL(str):
    """A shard URL to read from byte ``start`` on: a shard another consumer had begun
    before the split changed (`conveyor.state.elastic`)."""

    start: int

    def __new__(cls, url: str, start: int) -> Self:
        shard = super().__new__(cls, url)
        shard.start = start
        return shard

    def __getnewargs__(self) -> tuple[str, int]:  # type: ignore[override]
        return (str(self), self.start)


def _identity(urls: Sequence[str], seed: int | None) -> dict[str, Any]:
    """What a pass's shard order depends on (checked when a state is loaded)."""
    digest = hashlib.blake2b("\x00".join(urls).encode(), digest_size=8).hexdigest()
    return {"units": len(urls), "shards": digest, "shuffle": seed is not None, "seed": seed}


class _ShardCursor(Cursor[str]):
    """One consumer's entries of the pending shards (`conveyor.state.elastic.Pending`):
    ``c, c + n, ...`` of a fresh pass, or of what a merged checkpoint left to read."""

    def __init__(self, node: ShardLister, state: StateDict | None) -> None:
        consumers, consumer = node._slot()
        urls = node.list_now()
        if state is None:
            seed = node._pass_seed() if node.shuffle_shards else None
            base: Any = fresh_progress(_identity(urls, seed))
            self.index = 0
        else:
            base, self.index = _loaded(state, urls, consumers, consumer)
            seed = base["identity"]["seed"]
        self._order = SplitMix64(seed).permutation(len(urls)) if seed is not None else None
        self._urls = urls
        self._node = node
        self._base = base
        self._slot = (consumers, consumer)
        self._pending = Pending(base, len(urls))
        self._length = self._pending.share_length(consumer, consumers)
        if state is None and len(urls) < consumers and consumer == 0:
            warnings.warn(
                f"ShardLister: {len(urls)} shard(s) for {consumers} consumers (ranks x "
                f"workers): {consumers - len(urls)} consumer(s) get no data; write at least "
                "as many shards as ranks x num_workers",
                stacklevel=4,
            )

    def _entry(self, index: int) -> str:
        consumers, consumer = self._slot
        position = self._pending[consumer + index * consumers]
        url = self._urls[self._order[position] if self._order is not None else position]
        start = self._pending.offsets.get(position, 0)
        return ShardURL(url, start) if start else url

    def next(self) -> str:
        if self.index >= self._length:
            raise StopIteration
        url = self._entry(self.index)
        self.index += 1
        if self._node.prepare_next and self.index < self._length:
            return UrlWithNext(url, str(self._entry(self.index)), getattr(url, "start", 0))
        return url

    def state(self) -> StateDict:
        consumers, consumer = self._slot
        progress = consumer_progress(self._base, consumers, consumer, self.index, 0)
        return {"version": 2, "progress": dict(progress)}


def _loaded(
    state: StateDict, urls: list[str], consumers: int, consumer: int
) -> tuple[Mapping[str, Any], int]:
    """``(progress to split, entries of this consumer's share done)`` of a loaded state."""
    check_version(state, 2, "ShardLister")
    progress = state["progress"]
    if not is_elastic(progress):
        raise ValueError("ShardLister: the state's progress is no elastic progress")
    saved = progress["identity"]
    if saved.get("units") != len(urls):
        raise ValueError(
            f"ShardLister: the state covers {saved.get('units')} shards, but the URLs now "
            f"give {len(urls)}; resume over the same shards"
        )
    if saved.get("shards") != _identity(urls, None)["shards"]:
        raise ValueError(
            "ShardLister: the state was taken over other shard URLs (or another order of "
            "them); resume over the same shards"
        )
    if "consumers" not in progress:  # a merged progress: this consumer takes its share
        return progress, 0
    if (progress["consumers"], progress["consumer"]) != (consumers, consumer):
        raise ValueError(
            f"ShardLister: the state was taken as consumer {progress['consumer']} of "
            f"{progress['consumers']}, but this is consumer {consumer} of {consumers}; "
            "resume with the same number of ranks and workers, or read through TarShards "
            "in a DataLoader, which splits the rest again"
        )
    return progress, int(progress["index"])


class TarShards(IterDataPipe[dict[str, Any]]):
    """WebDataset-style tar shards as one pipe: the RFC's TarDataset.

    ``ShardLister -> open_files -> load_from_tar -> webdataset -> shuffle -> decode``:
    yields sample dicts ``{"__key__", "__url__", ext: value}``. Works as a plain iterable
    and with ``conveyor.DataLoader(..., num_workers=N)`` (each worker reads whole shards;
    see `ShardLister`).

    Args:
        urls: shard URLs, brace ranges or globs; local or any fsspec URL.
        decode: an image spec for `DecoderRegistry` (default ``"torchrgb8"``: CHW uint8
            tensors), a `DecoderRegistry`, or None for raw bytes.
        shuffle: shuffle shards per epoch and samples in a buffer of ``shuffle_buffer``
            (both toggled by ``set_shuffle`` / the DataLoader's ``shuffle``).
        shuffle_buffer: samples in the shuffle buffer.
        seed: base seed for the shard order (see `ShardLister`).
        storage_options: fsspec options (e.g. ``{"endpoint_url": ...}`` for s3fs).
        cache: a `ShardCache` for remote shards (local shards are never copied).
        block_size: bytes read per request from a shard.
        max_member_bytes: the largest tar member read (default 1 GiB); a larger one raises,
            or is counted and its sample dropped under ``"skip"`` (see `TarArchiveLoader`).
        on_error: ``"raise"``, ``"skip"`` or an `ErrorPolicy`, shared by every stage and
            readable as ``errors``. ``"raise"`` delivers every complete sample read before
            the error (the shuffle buffer's too), then raises it; ``"skip"`` counts samples
            lost (see `conveyor.formats.skips`).
        remote: timeouts and retries of remote reads (`RemoteOptions`; default: from the
            ``CONVEYOR_REMOTE_*`` environment variables, else its defaults).

    State: one flat, elastic progress (`conveyor.datapipes.iter.shard_state`): the
    shards done and begun, the byte offset of the next sample in the current one, and the
    shuffle buffer as the positions of its samples (re-read on resume: about 5.4 bytes a
    sample). A DataLoader resumes it on any number of workers, worker kind and world size.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        decode: str | DecoderRegistry | None = "torchrgb8",
        shuffle: bool = False,
        shuffle_buffer: int = 1000,
        seed: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        cache: ShardCache | None = None,
        block_size: int = DEFAULT_BLOCK_BYTES,
        on_error: OnError | ErrorPolicy = "raise",
        remote: RemoteOptions | None = None,
        max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES,
    ) -> None:
        self.errors = as_policy(on_error)
        self.shards = ShardLister(
            urls,
            shuffle=shuffle,
            seed=seed,
            storage_options=storage_options,
            remote=remote,
            prepare_next=cache is None,  # a cached shard may need no network at all
        )
        opened = FileOpener(
            self.shards,
            mode="b",
            storage_options=storage_options,
            cache=cache,
            block_size=block_size,
            on_error=self.errors,
            remote=remote,
        )
        members = TarArchiveLoader(
            opened, stream=False, on_error=self.errors, max_member_bytes=max_member_bytes
        )
        samples: IterDataPipe[Any] = WebDataset(members, on_error=self.errors)
        samples = _EndBeforeError(samples, self.errors)
        self.shuffler = samples = Shuffler(samples, buffer_size=shuffle_buffer)
        samples.set_shuffle(shuffle)
        if decode is not None:
            registry = decode if isinstance(decode, DecoderRegistry) else DecoderRegistry(decode)
            samples = RoutedDecoder(samples, registry=registry, on_error=self.errors)
        self.datapipe = samples

    def _make_cursor(self, state: StateDict | None) -> Cursor[dict[str, Any]]:
        return _PassCursor(self, state)

    def checkpoint_identity(self) -> str:
        """Which data a checkpoint of this pipe is about: its shard URLs (as given)."""
        return "TarShards:" + str(_identity(self.shards.urls, None)["shards"])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state``: this pipe's own, or a progress merged from several
        consumers' (`conveyor.merge_checkpoints`), which this consumer splits again."""
        if is_flat(state) and "version" not in state:
            state = {**state, "version": shard_state.STATE_VERSION}
        super().load_state_dict(state)


class _PassCursor(SourceCursor[Any]):
    """The pass's output; raises the error `_EndBeforeError` kept, once all is delivered.

    Its state is the flat elastic one of `shard_state` (any topology resumes it)."""

    def __init__(self, node: TarShards, state: StateDict | None) -> None:
        node.errors.deferred = None
        self._decoded = node.datapipe is not node.shuffler
        nested = None
        if state is not None:
            check_version(state, shard_state.STATE_VERSION, "TarShards")
            slot = node.shards._slot()
            chain = shard_state.unflatten(state, slot, self._decoded, node.shuffler._enabled)
            nested = {"version": 1, "source": chain}
        super().__init__(node.datapipe, nested, "TarShards")
        self._policy = node.errors
        self._lister = node.shards

    def state(self) -> StateDict:
        nested = self.source._held_state()
        return shard_state.flatten(nested, self._decoded, self._lister._held_state())

    def next(self) -> Any:
        try:
            return self.source.nonblocking_next()
        except StopIteration:
            error, self._policy.deferred = self._policy.deferred, None
            if error is None:
                raise
        raise error  # outside the handler: the error keeps its own cause and context


class _EndBeforeError(IterDataPipe[Any]):
    """Below the shuffle buffer: a `SampleError` ends the stream here and is kept in the
    policy's ``deferred``, so the buffered samples are delivered before it is raised."""

    def __init__(self, datapipe: IterDataPipe[Any], policy: ErrorPolicy) -> None:
        self.datapipe = datapipe
        self.policy = policy

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return _EndBeforeErrorCursor(self, state)

    def can_reread(self) -> bool:
        return self.datapipe.can_reread()

    def reread(self, positions: Sequence[tuple[str, int]]) -> list[Any]:
        return self.datapipe.reread(positions)


class _EndBeforeErrorCursor(SourceCursor[Any]):
    def __init__(self, node: _EndBeforeError, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, "TarShards")
        self._policy = node.policy
        self._ended = False

    def next(self) -> Any:
        if self._ended:
            raise StopIteration
        try:
            return self.source.nonblocking_next()
        except SampleError as error:
            self._ended = True
            self._policy.deferred = error
            raise StopIteration from None

    def item_position(self) -> tuple[str, int] | None:
        return self.source.item_position()
