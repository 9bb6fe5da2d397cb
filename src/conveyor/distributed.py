"""Sharding a dataset across the ranks of a distributed job.

Same as ``torch.utils.data.distributed``; `DistributedSampler` yields the same indices as
torch's for the same arguments.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sized
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist

from conveyor.sampler import Sampler, _chunked
from conveyor.torch_compat import TorchDistributedSampler

T_co = TypeVar("T_co", covariant=True)

__all__ = ["DistributedSampler", "ProcessGroupNotInitializedError"]


class ProcessGroupNotInitializedError(RuntimeError, ValueError):
    """No ``num_replicas``/``rank`` given and no process group to read them from.

    A `RuntimeError`, and also a `ValueError` because that is what torch raises when the
    package is available but no process group was initialised.
    """


def _from_process_group(argument: str) -> tuple[int, int]:
    """``(world_size, rank)`` of the default process group, or a clear error."""
    if not dist.is_available() or not dist.is_initialized():
        state = "is not available" if not dist.is_available() else "is not initialized"
        raise ProcessGroupNotInitializedError(
            f"DistributedSampler got no {argument} and torch.distributed {state}: pass "
            "num_replicas= and rank= explicitly, or call "
            "torch.distributed.init_process_group() first"
        )
    return dist.get_world_size(), dist.get_rank()


@_chunked
class DistributedSampler(Sampler[T_co], TorchDistributedSampler[T_co]):
    """This rank's share of the dataset's indices. Same as `torch.utils.data.DistributedSampler`.

    Every rank sees ``ceil(len / num_replicas)`` indices (``floor`` with ``drop_last``);
    without ``drop_last`` the index list is padded by repeating it from the start. Call
    `set_epoch` before each epoch to reshuffle. The index list is built when ``iter()`` is
    called. Difference: with neither the arguments nor an initialised process group, raises
    `ProcessGroupNotInitializedError` (a `RuntimeError` and a `ValueError`).

    Args:
        dataset: the dataset to split (only its ``len()`` is used).
        num_replicas: ranks sharing the dataset (default: the world size of torch.distributed).
        rank: this rank (default: torch.distributed's).
        shuffle: shuffle the indices, differently every epoch (see `set_epoch`).
        seed: the shuffle's seed; the same on every rank.
        drop_last: drop the tail that does not split evenly instead of padding it.
    """

    dataset: Sized  # type: ignore[assignment]  # torch says Dataset; any sized object works

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None:
            num_replicas = _from_process_group("num_replicas")[0]
        if rank is None:
            rank = _from_process_group("rank")[1]
        if rank >= num_replicas or rank < 0:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]"
            )
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        length = len(dataset)
        if drop_last and length % num_replicas != 0:
            # Drop the tail so that every rank gets the same count.
            self.num_samples = math.ceil((length - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(length / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed
        self._consumed: int | None = None  # see resume_after

    def resume_after(self, consumed: int) -> None:
        """Deal out, in the next iteration only, what the ranks had not consumed yet.

        ``consumed`` counts leading positions of this epoch's global order taken by all
        ranks together (batches x batch size x old world size, for ranks that ran in
        step). A job can then resume mid-epoch with a different number of ranks: every
        remaining sample exactly once, padded (or trimmed, with ``drop_last``) so ranks
        stay equal.
        """
        self._consumed = consumed

    def _order(self) -> list[int]:
        length = len(self.dataset)
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order: list[int] = torch.randperm(length, generator=generator).tolist()
            return order
        return list(range(length))

    def _remaining_total(self, remaining: int) -> int:
        if self.drop_last:
            return remaining - remaining % self.num_replicas
        return math.ceil(remaining / self.num_replicas) * self.num_replicas

    def _rank_indices(self) -> list[int]:
        indices = self._order()
        if self._consumed is not None:
            indices = indices[self._consumed :]
            self._consumed = None
            total = self._remaining_total(len(indices))
            if len(indices) < total:  # pad by repetition, as for a whole epoch
                indices += (indices * math.ceil(total / len(indices)))[: total - len(indices)]
            return indices[self.rank : total : self.num_replicas]
        if self.drop_last:
            indices = indices[: self.total_size]
        elif indices:
            # Repeat the whole list as often as needed: padding may exceed its length.
            padding = self.total_size - len(indices)
            indices += (indices * math.ceil(padding / len(indices)))[:padding]
        if len(indices) != self.total_size:
            raise AssertionError(
                f"Number of indices ({len(indices)}) does not match total_size "
                f"({self.total_size}): the dataset changed length after the sampler was built"
            )
        return indices[self.rank : self.total_size : self.num_replicas]

    def __iter__(self) -> Iterator[T_co]:
        return cast(Iterator[T_co], iter(self._rank_indices()))

    def _chunks(self) -> Iterator[list[int]]:
        yield self._rank_indices()

    def __len__(self) -> int:
        if self._consumed is not None:
            remaining = max(0, len(self.dataset) - self._consumed)
            return self._remaining_total(remaining) // self.num_replicas
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds the next shuffle (``seed + epoch``); same on every rank."""
        self.epoch = epoch


def world_and_rank() -> tuple[int, int]:
    """``(world_size, rank)`` from torch.distributed when initialised, else ``(1, 0)``."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class RankCollectives:
    """The agreements a DataLoader needs across ranks, over one gloo group.

    ``agree_seed``: every rank uses rank 0's seed (DataPipe shuffles must agree before
    sharding). ``share_text``: every rank gets rank 0's text (its listing of the shard
    globs: one listing per job). ``all_texts``: every rank's text (the doctor's timings).
    ``all_have``: whether every rank still has a batch
    (``fullsync=True`` stops all ranks together so uneven shards cannot hang DDP). All are
    collectives when
    torch.distributed is initialised with more than one rank: every rank must call them
    in the same order, as ranks running the same epochs do. The gloo group is created on
    first use, so it works beside NCCL training groups.
    """

    def __init__(self) -> None:
        self._group: Any = None

    def _world_group(self) -> Any:
        if self._group is None:
            default_is_gloo = dist.get_backend() == "gloo"
            self._group = dist.group.WORLD if default_is_gloo else dist.new_group(backend="gloo")
        return self._group

    def agree_seed(self, seed: int) -> int:
        if world_and_rank()[0] == 1:
            return seed
        value = torch.tensor([seed], dtype=torch.int64)
        dist.broadcast(value, src=0, group=self._world_group())
        return int(value.item())

    def share_text(self, text: str) -> str:
        """Rank 0's ``text`` on every rank (sent as UTF-8 bytes in a tensor: never a
        pickle); with one rank, ``text`` itself."""
        if world_and_rank()[0] == 1:
            return text
        group = self._world_group()
        data = text.encode() if dist.get_rank() == 0 else b""
        length = torch.tensor([len(data)], dtype=torch.int64)
        dist.broadcast(length, src=0, group=group)
        buffer = torch.zeros(int(length.item()), dtype=torch.uint8)
        if data:
            buffer.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        dist.broadcast(buffer, src=0, group=group)
        return bytes(buffer.numpy()).decode()

    def all_texts(self, text: str) -> list[str]:
        """Every rank's ``text``, in rank order (UTF-8 bytes in tensors: never a pickle);
        with one rank, ``[text]``."""
        world = world_and_rank()[0]
        if world == 1:
            return [text]
        group = self._world_group()
        data = text.encode()
        lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(lengths, torch.tensor([len(data)], dtype=torch.int64), group=group)
        longest = max(int(length.item()) for length in lengths)
        mine = torch.zeros(longest, dtype=torch.uint8)
        if data:
            mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        buffers = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world)]
        dist.all_gather(buffers, mine, group=group)
        return [
            bytes(buffer[: int(length.item())].numpy()).decode()
            for buffer, length in zip(buffers, lengths, strict=True)
        ]

    def all_have(self, has_batch: bool) -> bool:
        if world_and_rank()[0] == 1:
            return has_batch
        value = torch.tensor([int(has_batch)], dtype=torch.int64)
        dist.all_reduce(value, op=dist.ReduceOp.MIN, group=self._world_group())
        return bool(value.item())


# Attributes by which samplers that split a dataset between ranks are known: torch's and
# conveyor's DistributedSampler (num_replicas), accelerate's BatchSamplerShard
# (num_processes). Wrappers (BatchSampler, accelerate's SkipBatchSampler) are looked into.
_SHARDING_ATTRIBUTES = ("num_replicas", "num_processes")
_WRAPPED_SAMPLER_ATTRIBUTES = ("sampler", "batch_sampler")


def shards_by_rank(sampler: object, depth: int = 4) -> bool:
    """Whether ``sampler`` (or one it wraps) gives each rank its own part of the data."""
    if any(hasattr(sampler, name) for name in _SHARDING_ATTRIBUTES):
        return True
    if depth == 0:
        return False
    inner = (getattr(sampler, name, None) for name in _WRAPPED_SAMPLER_ATTRIBUTES)
    return any(shards_by_rank(x, depth - 1) for x in inner if x is not None and x is not sampler)


def warn_if_sampler_does_not_shard(index_sampler: object, world_size: int) -> None:
    """Under torch.distributed with several ranks, a map-style loader whose sampler does
    not split by rank makes every rank train on the whole dataset, silently."""
    if world_size <= 1 or shards_by_rank(index_sampler):
        return
    warnings.warn(
        f"this DataLoader runs under torch.distributed with world_size={world_size}, but its "
        f"sampler ({type(getattr(index_sampler, 'sampler', index_sampler)).__name__}) does "
        "not split the dataset by rank: every rank loads every sample. Pass "
        "sampler=conveyor.DistributedSampler(dataset) (or let your framework inject one)",
        stacklevel=4,
    )
