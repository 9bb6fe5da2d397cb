"""`GlobalShuffleSampler`: a shuffle of any size in O(1) memory, the same for every split.

The epoch's order is a keyed bijection (`conveyor.global_order.EpochOrder`), evaluated
for the positions this rank needs, a block of NumPy at a time: no ``randperm`` of the
dataset (8 bytes a sample), no start-up cost, and a resume that starts at any position.
"""

from __future__ import annotations

import itertools
import operator
import os
from collections.abc import Iterator, Mapping
from typing import Any, TypedDict, cast

import numpy as np
from numpy.typing import NDArray

from conveyor.distributed import ProcessGroupNotInitializedError, world_and_rank
from conveyor.global_order import EpochOrder
from conveyor.keyed_permutation import MAX_SIZE
from conveyor.sampler import Sampler

__all__ = ["GlobalShuffleSampler", "GlobalShuffleState"]

STATE_VERSION = 1
_FIRST_CHUNK = 256  # small, so the first index comes out in well under a millisecond
_CHUNK = 16384  # large enough to amortise NumPy's per-call cost, small enough for L2


class GlobalShuffleState(TypedDict):
    """`GlobalShuffleSampler.state_dict`: JSON-serialisable, independent of the world size."""

    version: int
    num_samples: int
    seed: int
    epoch: int
    block_size: int | None
    position: int  # leading positions of the epoch's global order consumed by all ranks


class GlobalShuffleSampler(Sampler[int]):
    """This rank's share of a global shuffle of ``range(num_samples)``, in O(1) memory.

    Every epoch has one global order, a keyed bijection of ``range(num_samples)`` picked by
    ``(seed, epoch)``; `permutation` gives any block of it. Rank ``r`` of ``W`` takes global
    positions ``r, r + W, r + 2W, ...``, so interleaving the ranks' outputs gives the same
    global order whatever ``W`` is. Like `DistributedSampler`, each rank yields
    ``ceil(num_samples / W)`` indices (``floor`` with ``drop_last=True``, which leaves out
    the last ``num_samples % W`` positions of the order). Without ``drop_last`` the missing
    positions ``num_samples, num_samples + 1, ...`` are filled from the start of the order:
    position ``p`` holds the index at ``p - num_samples`` (wrapping again if needed), so
    the last ``ceil(num_samples / W) * W - num_samples`` indices are repeats.

    ``block_size=B`` trades shuffle quality for locality: the order visits blocks of ``B``
    consecutive indices (e.g. one tar shard each) one at a time, in a shuffled order, each
    shuffled inside. A reader that caches ``k`` shards then hits its cache on all but one
    read per block, for any ``k >= 1``; the price is that samples of one block stay within
    ``B`` positions of each other.

    ``num_replicas`` and ``rank`` default to those of ``torch.distributed`` when it is
    initialised, else to a single process (1 and 0); a launcher's ``WORLD_SIZE`` > 1 with
    no process group raises `ProcessGroupNotInitializedError`, as `DistributedSampler`
    does. ``seed`` must be the same on every rank. ``state_dict()`` records the epoch and
    the global position reached (ranks are assumed to advance in step, as DDP ranks do);
    `load_state_dict` makes the next iteration start there, in O(1), with any number of
    ranks.

    Args:
        num_samples: the size of the index space, ``range(num_samples)``.
        seed: the key of the order; the same on every rank.
        num_replicas: ranks sharing the order (default: torch.distributed's world size, else 1).
        rank: this rank (default: torch.distributed's, else 0).
        drop_last: leave out the last ``num_samples % num_replicas`` positions instead of
            padding with repeats.
        block_size: visit blocks of this many consecutive indices one at a time (locality for
            shard readers); None shuffles the whole space.
    """

    def __init__(
        self,
        num_samples: int,
        *,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        block_size: int | None = None,
    ) -> None:
        _check_int("num_samples", num_samples, 0, MAX_SIZE)
        if block_size is not None:
            _check_int("block_size", block_size, 1, MAX_SIZE)
        if num_replicas is None or rank is None:
            world, process_rank = _world_and_rank_or_raise()
            num_replicas = world if num_replicas is None else num_replicas
            rank = process_rank if rank is None else rank
        _check_int("num_replicas", num_replicas, 1, MAX_SIZE)
        if not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]"
            )
        if not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self.num_samples = num_samples
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.block_size = block_size
        self.epoch = 0
        self._start = 0  # global position the next iteration starts from
        self._order: EpochOrder | None = None
        self._cursor: _Cursor | None = None

    # The epoch's global order --------------------------------------------------------

    def _epoch_order(self) -> EpochOrder:
        if self._order is None:
            self._order = EpochOrder(self.num_samples, self.seed, self.epoch, self.block_size)
        return self._order

    def permutation(self, start: int = 0, stop: int | None = None) -> NDArray[np.int64]:
        """Positions ``[start, stop)`` of this epoch's global order (indices, ``int64``).

        ``permutation(0, num_samples)`` is the whole order: a permutation of
        ``range(num_samples)``; any block costs O(stop - start), wherever it starts.
        """
        stop = self.num_samples if stop is None else stop
        if not 0 <= start <= stop <= self.num_samples:
            raise ValueError(
                f"permutation(start={start}, stop={stop}) is outside the epoch's "
                f"positions [0, {self.num_samples}]"
            )
        order = self._epoch_order()
        out = np.empty(stop - start, dtype=np.int64)
        for begin in range(start, stop, _CHUNK):  # chunks that stay in cache
            end = min(stop, begin + _CHUNK)
            out[begin - start : end - start] = order(np.arange(begin, end, dtype=np.uint64))
        return out

    def _indices_at(self, positions: NDArray[np.uint64]) -> NDArray[np.uint64]:
        """Indices at global positions, positions past the end wrapping to the start."""
        if positions.size and int(positions[-1]) >= self.num_samples:
            positions = positions % np.uint64(self.num_samples)
        return self._epoch_order()(positions)

    # Splitting between ranks ---------------------------------------------------------

    def _count_from(self, start: int) -> int:
        """Indices each rank yields in an iteration starting at global position ``start``."""
        remaining = max(0, self.num_samples - start)
        if self.drop_last:
            return remaining // self.num_replicas
        return -(-remaining // self.num_replicas)

    @property
    def total_size(self) -> int:
        """Global positions a whole epoch hands out (all ranks), padding included."""
        return self._count_from(0) * self.num_replicas

    def __len__(self) -> int:
        """Indices this rank yields in the current iteration, or else in the next one (a
        resumed iteration counts what is left)."""
        if self._cursor is not None and not self._cursor.finished:
            return self._cursor.count
        return self._count_from(self._start)

    def __iter__(self) -> Iterator[int]:
        """This rank's indices from the loaded position (once), else from the epoch's start."""
        cursor = _Cursor(self, self._start, self._count_from(self._start))
        self._cursor = cursor
        self._start = 0
        return cursor.iterate()

    def set_epoch(self, epoch: int) -> None:
        """Pick the epoch whose order the next iteration follows; the same on every rank.

        A new epoch starts at position 0; setting the epoch already set (as a training loop
        does after `load_state_dict`) keeps the position loaded.
        """
        if epoch != self.epoch:
            self.epoch = epoch
            self._order = None
            self._start = 0
            self._cursor = None

    # Checkpoints ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the current iteration is (or where the next one starts), O(1) and tiny."""
        position = self._start if self._cursor is None else self._cursor.position()
        state = GlobalShuffleState(
            version=STATE_VERSION,
            num_samples=self.num_samples,
            seed=self.seed,
            epoch=self.epoch,
            block_size=self.block_size,
            position=position,
        )
        return cast(dict[str, Any], state)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Make the next iteration continue the checkpointed epoch at its position.

        Adopts the checkpoint's ``seed`` and ``epoch``. A checkpoint of a dataset of another
        size, or with another ``block_size``, describes a different order: `ValueError`.
        """
        version = state_dict.get("version")
        if version != STATE_VERSION:
            raise ValueError(
                f"GlobalShuffleSampler state has version {version!r}; this conveyor reads "
                f"version {STATE_VERSION}"
            )
        for field in ("num_samples", "block_size"):
            if state_dict[field] != getattr(self, field):
                raise ValueError(
                    f"GlobalShuffleSampler checkpoint has {field}={state_dict[field]!r} but "
                    f"this sampler has {field}={getattr(self, field)!r}: the order would "
                    "differ, so the checkpoint cannot be resumed exactly"
                )
        position = state_dict["position"]
        _check_int("position", position, 0, MAX_SIZE * 2)
        self.seed = int(state_dict["seed"])
        self.epoch = int(state_dict["epoch"])
        self._order = None
        self._start = position
        self._cursor = None


class _Cursor:
    """One iteration of one rank: yields indices a block at a time and knows where it is."""

    def __init__(self, sampler: GlobalShuffleSampler, start: int, count: int) -> None:
        self._sampler = sampler
        self._start = start
        self.count = count
        self.finished = False
        self._done_before_block = 0  # indices yielded before the current block
        self._block: list[int] = []
        self._block_iter: Iterator[int] = iter(self._block)

    def position(self) -> int:
        """Global position reached: every position below it is consumed (ranks in step)."""
        left = operator.length_hint(self._block_iter)
        done = self._done_before_block + len(self._block) - left
        return self._start + done * self._sampler.num_replicas

    def iterate(self) -> Iterator[int]:
        # chain runs the per-index loop in C; this generator only wakes once a block.
        return itertools.chain.from_iterable(self._blocks())

    def _blocks(self) -> Iterator[Iterator[int]]:
        sampler = self._sampler
        world = sampler.num_replicas
        first = self._start + sampler.rank
        done = 0
        size = _FIRST_CHUNK
        while done < self.count:
            take = min(size, self.count - done)
            begin = first + done * world
            positions = np.arange(begin, begin + take * world, world, dtype=np.uint64)
            self._done_before_block = done
            self._block = sampler._indices_at(positions).tolist()
            self._block_iter = iter(self._block)
            yield self._block_iter
            done += take
            size = _CHUNK
        self._done_before_block = done
        self._block = []
        self._block_iter = iter(self._block)
        self.finished = True


def _world_and_rank_or_raise() -> tuple[int, int]:
    """torch.distributed's world and rank; (1, 0) for a single process. A launcher that
    started several processes (``WORLD_SIZE`` > 1) without an initialised process group is
    an error: every process would otherwise take the whole order."""
    world, rank = world_and_rank()
    launched = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world == 1 and launched > 1:
        raise ProcessGroupNotInitializedError(
            f"GlobalShuffleSampler got no num_replicas/rank, WORLD_SIZE={launched} but "
            "torch.distributed is not initialized: call "
            "torch.distributed.init_process_group() first, or pass num_replicas= and rank="
        )
    return world, rank


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
