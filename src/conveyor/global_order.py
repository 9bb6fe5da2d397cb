"""One epoch's global order of a dataset: position -> index, computed pointwise.

`EpochOrder` is a pure function of ``(num_samples, seed, epoch, block_size)``: any process
can compute any block of the order without the rest, which is what lets every rank and
worker agree on one order without communicating, and a resume start anywhere in O(1).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from conveyor.keyed_permutation import (
    Indices,
    KeyedPermutation,
    derive_key,
    mix64,
    mix64_array,
    round_count,
    walk,
)

__all__ = ["EpochOrder"]

_ORDER, _BLOCKS, _WITHIN = 1, 2, 3  # key purposes


class EpochOrder:
    """The bijection ``[0, num_samples) -> [0, num_samples)`` of one epoch.

    Without ``block_size``: one keyed permutation of all indices. With ``block_size=B``:
    the indices are cut into blocks of ``B`` consecutive indices (the last one shorter when
    ``B`` does not divide ``num_samples``); the order visits the blocks in a keyed
    permutation and the indices of each block, consecutively, in a keyed permutation of
    their own. So a reader of shards of ``B`` samples touches one shard at a time, at the
    price of a weaker shuffle: two samples of one block are never more than ``B - 1``
    positions apart.
    """

    __slots__ = ("_block", "_blocks", "_short_slot", "_whole", "_within_key", "num_samples")

    def __init__(self, num_samples: int, seed: int, epoch: int, block_size: int | None) -> None:
        self.num_samples = num_samples
        self._block = block_size or 1
        if self._block == 1 or self._block >= num_samples:
            # Blocks of one, or one block holding everything: the plain shuffle.
            self._whole: KeyedPermutation | None = KeyedPermutation(
                num_samples, derive_key(seed, epoch, _ORDER)
            )
            return
        self._whole = None
        block_size = self._block
        count = -(-num_samples // block_size)
        self._blocks = KeyedPermutation(count, derive_key(seed, epoch, _BLOCKS))
        self._within_key = derive_key(seed, epoch, _WITHIN)
        # Where the shorter last block sits in the order of blocks (if there is one).
        short = num_samples % block_size != 0
        self._short_slot = self._blocks.position_of(count - 1) if short else count

    def __call__(self, positions: Indices) -> Indices:
        """The dataset indices at ``positions`` (each ``< num_samples``), a new array."""
        if self._whole is not None:
            return self._whole(positions)
        return self._blocked(positions)

    def _blocked(self, positions: Indices) -> Indices:
        size = np.uint64(self._block)
        count = self._blocks.size
        tail = np.uint64(self.num_samples - (count - 1) * int(size))  # last block's size
        short_start = np.uint64(self._short_slot) * size
        after = positions >= short_start + tail
        in_short = (positions >= short_start) & ~after
        # Positions after the short block are shifted by the size it lacks.
        shifted = np.where(after, positions - tail + size, positions)
        slots = np.where(in_short, np.uint64(self._short_slot), shifted // size)
        offsets = np.where(in_short, positions - short_start, shifted % size)
        blocks = self._blocks(slots)
        inner = self._permute_within(blocks, offsets, in_short, int(tail))
        return blocks * size + inner

    def _permute_within(
        self, blocks: Indices, offsets: Indices, in_short: NDArray[np.bool_], tail: int
    ) -> Indices:
        keys = _per_block_keys(self._within_key, blocks, round_count(self._block))
        if not in_short.any():
            return walk(offsets, self._block, keys)
        out = np.empty_like(offsets)
        full = np.flatnonzero(~in_short)
        if full.size:
            out[full] = walk(offsets[full], self._block, [k[full] for k in keys])
        short = np.flatnonzero(in_short)
        short_keys = _per_block_keys(self._within_key, blocks[short], round_count(tail))
        out[short] = walk(offsets[short], tail, short_keys)
        return out


def _per_block_keys(base: int, blocks: Indices, rounds: int) -> list[Indices]:
    """Round keys of each value's block, hashed once per run of equal blocks."""
    if blocks.size == 0:
        return [blocks.copy() for _ in range(rounds)]
    starts = np.flatnonzero(blocks[1:] != blocks[:-1]) + 1
    starts = np.concatenate(([0], starts))
    lengths = np.diff(np.append(starts, blocks.size))
    block_keys = mix64_array(blocks[starts] ^ np.uint64(base))
    return [
        np.repeat(mix64_array(block_keys ^ np.uint64(mix64(number))), lengths)
        for number in range(rounds)
    ]
