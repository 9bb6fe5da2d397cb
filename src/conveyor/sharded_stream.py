"""`ShardedStream`: a stream of shards whose checkpoint resumes on any topology.

Each consumer (a worker of a rank) reads whole shards; its checkpoint says which shards of
its share it finished and how many samples of the current one it delivered
(`conveyor.state.elastic`). The DataLoader folds its workers' checkpoints into one
topology-free progress when the number of workers, the worker kind or the world size
changes, and deals what is left out again. See docs/long-runs.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from conveyor.dataset import IterableDataset
from conveyor.distributed import world_and_rank
from conveyor.engine.workers.worker_info import get_worker_info
from conveyor.global_order import EpochOrder
from conveyor.state.elastic import (
    ConsumerProgress,
    Pending,
    Progress,
    consumer_progress,
    fresh_progress,
    is_elastic,
)

__all__ = ["ShardedStream"]

S = TypeVar("S")
T = TypeVar("T")


class ShardedStream(IterableDataset[T], Generic[S, T]):
    """Samples of ``shards``, each consumer reading whole shards; exact resume anywhere.

    Args:
        shards: the units of work (URLs, file names, lists, ...), one global order.
        read: ``read(shard, offset)`` yields the shard's samples from its ``offset``-th
            on (the same samples in the same order every time); seek there if you can.
        shuffle: visit the shards in a keyed permutation of ``(seed, epoch)`` (the
            `GlobalShuffleSampler` order); shuffle inside a shard in ``read``, by a rule
            that depends only on the shard and the epoch, to keep resume exact.
        seed: the shard shuffle's seed, the same on every rank.

    With ``W`` ranks of ``N`` workers, consumer ``r * N + w`` reads entries ``c, c + WN,
    ...`` of the shards left to read. `state_dict` is that consumer's progress; the
    DataLoader merges its workers' (and `conveyor.merge_checkpoints` several ranks')
    into one that any ``N'`` workers of any kind on ``W'`` ranks resume: shards not
    started are dealt out again, shards in progress continue at their offset.
    """

    restarts_each_pass = True  # its state is where an epoch is: the next one starts afresh

    def __init__(
        self,
        shards: Sequence[S],
        read: Callable[[S, int], Iterable[T]],
        *,
        shuffle: bool = False,
        seed: int = 0,
    ) -> None:
        self.shards = list(shards)
        self.read = read
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self._digest = hashlib.blake2b(
            "\x00".join(map(str, self.shards)).encode(), digest_size=8
        ).hexdigest()
        self._loaded: Mapping[str, Any] | None = None
        self._cursor: _Cursor[S, T] | None = None

    def checkpoint_identity(self) -> str:
        """Which data a checkpoint of this stream is about: its shards (digest, number)."""
        return f"ShardedStream:{self._digest}:{len(self.shards)}"

    def identify_last(self) -> int:
        """The identity of the sample the iteration yielded last, the same on any topology:
        its shard's position in the epoch's order and its index in the shard (the loader's
        data-order certificate, `conveyor.state.certificate`)."""
        cursor = self._cursor
        assert cursor is not None, "identify_last() before iteration"
        return (cursor.position << 32) | (cursor.offset - 1)

    def set_epoch(self, epoch: int) -> None:
        """Shuffle the shards by ``epoch`` from the next iteration on (the same on every rank)."""
        self.epoch = epoch

    def _identity(self) -> dict[str, Any]:
        return {
            "units": len(self.shards),
            "shards": self._digest,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "epoch": self.epoch,
        }

    def _shard_at(self) -> Callable[[int], S]:
        if not self.shuffle:
            return self.shards.__getitem__
        order = EpochOrder(len(self.shards), self.seed, self.epoch, None)
        return lambda position: self.shards[int(order(np.array([position], np.uint64))[0])]

    def __iter__(self) -> Iterator[T]:
        consumers, consumer = _slot()
        loaded, self._loaded = self._loaded, None
        index, offset = 0, None
        if loaded is None:
            base: Mapping[str, Any] = fresh_progress(self._identity())
        elif "consumers" in loaded:
            if (loaded["consumers"], loaded["consumer"]) != (consumers, consumer):
                raise ValueError(
                    f"ShardedStream: this checkpoint is consumer {loaded['consumer']} of "
                    f"{loaded['consumers']}, this iteration is consumer {consumer} of "
                    f"{consumers}; merge the consumers' checkpoints "
                    "(conveyor.state.elastic.merge) to resume on another topology"
                )
            base, index, offset = loaded, int(loaded["index"]), int(loaded["offset"])
        else:
            base = loaded
        cursor = _Cursor(self, base, consumers, consumer, index, offset)
        self._cursor = cursor
        return cursor.samples()

    def state_dict(self) -> dict[str, Any]:
        """This consumer's progress (``ConsumerProgress``), or the progress loaded."""
        if self._cursor is not None:
            return dict(self._cursor.state())
        if self._loaded is not None:
            return dict(self._loaded)
        return dict(fresh_progress(self._identity()))

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Make the next iteration continue ``state_dict``; adopts its epoch.

        ValueError when it is no ShardedStream progress, or one of other shards (their
        number or names), another ``shuffle`` or ``seed``, naming the field.
        """
        if not is_elastic(state_dict):
            raise ValueError(
                "ShardedStream.load_state_dict expects the dict its state_dict() returned "
                f"(an elastic progress), got keys {sorted(map(str, state_dict))}"
            )
        saved = state_dict["identity"]
        current = self._identity()
        for field in ("units", "shards", "shuffle", "seed"):
            if saved.get(field) != current[field]:
                raise ValueError(
                    f"ShardedStream checkpoint has {field}={saved.get(field)!r}, this stream "
                    f"has {field}={current[field]!r}: resume over the same shards and order"
                )
        self.epoch = int(saved["epoch"])
        self._loaded = dict(state_dict)
        self._cursor = None


class _Cursor(Generic[S, T]):
    """One consumer's iteration: its entries of the pending shards, and how far it got."""

    def __init__(
        self,
        stream: ShardedStream[S, T],
        base: Mapping[str, Any],
        consumers: int,
        consumer: int,
        index: int,
        offset: int | None,
    ) -> None:
        self._stream = stream
        self._base = Progress(
            elastic=base["elastic"],
            identity=dict(base["identity"]),
            below=int(base["below"]),
            done=list(base["done"]),
            partial=[list(pair) for pair in base["partial"]],
        )
        self._pending = Pending(self._base, len(stream.shards))
        self._consumers, self._consumer = consumers, consumer
        self.index = index
        self.position = 0  # the shard being read (its position in the epoch's order)
        self._resume_offset = offset
        if offset is None:  # before the first read: where the first entry's reading starts
            first = next(iter(self._pending.share(consumer, consumers, index)), None)
            offset = 0 if first is None else int(first[1])
        self.offset = offset

    def state(self) -> ConsumerProgress:
        return consumer_progress(
            self._base, self._consumers, self._consumer, self.index, self.offset
        )

    def samples(self) -> Iterator[T]:
        shard_at = self._stream._shard_at()
        read = self._stream.read
        share = self._pending.share(self._consumer, self._consumers, self.index)
        for position, pending_offset in share:
            start = pending_offset if self._resume_offset is None else self._resume_offset
            self._resume_offset = None
            self.offset = start
            self.position = position
            for sample in read(shard_at(position), start):
                self.offset += 1
                yield sample
            self.index += 1
            self.offset = 0


def _slot() -> tuple[int, int]:
    """``(consumers, this consumer)``: ranks x workers of the loader iterating here."""
    world, rank = world_and_rank()
    info = get_worker_info()
    workers, worker = (1, 0) if info is None else (int(info.num_workers), int(info.id))
    return world * workers, rank * workers + worker
