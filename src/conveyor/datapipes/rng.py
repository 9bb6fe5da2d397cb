"""A tiny seedable random generator whose whole state is one integer.

Shufflers checkpoint their generator in every ``state_dict()``; Python's ``random.Random``
state is 625 integers, this one is a single 64-bit counter (SplitMix64), so states stay
small and restoring is exact.
"""

from __future__ import annotations

from typing import Self

__all__ = ["SplitMix64", "draw_seed"]

_MASK = (1 << 64) - 1


class SplitMix64:
    """SplitMix64 (Steele, Lea, Flood 2014): fast, well mixed, state = one int."""

    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK

    def next_u64(self) -> int:
        """The next 64-bit value."""
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """A uniform integer in ``[0, n)`` (multiply-shift; bias below n / 2**64)."""
        if n <= 0:
            raise ValueError(f"n should be positive, got {n}")
        return (self.next_u64() * n) >> 64

    def permutation(self, n: int) -> list[int]:
        """A uniformly shuffled ``list(range(n))`` (Fisher-Yates)."""
        order = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.below(i + 1)
            order[i], order[j] = order[j], order[i]
        return order


def draw_seed() -> int:
    """A seed from torch's global generator, so ``torch.manual_seed`` makes runs repeat."""
    import torch

    return int(torch.empty((), dtype=torch.int64).random_().item())


class ShuffleSettings:
    """``set_shuffle`` / ``set_seed``: what `apply_shuffle_settings` and `apply_random_seed`
    call on every shuffling node. Subclasses read ``_enabled`` and ``_seed``."""

    _enabled: bool = True
    _seed: int | None = None

    @property
    def _shuffle_enabled(self) -> bool:
        """torch's name for whether the next pass shuffles (accelerate reads it)."""
        return self._enabled

    @_shuffle_enabled.setter
    def _shuffle_enabled(self, enabled: bool) -> None:
        self._enabled = enabled

    def set_shuffle(self, shuffle: bool = True) -> Self:
        """Turn shuffling on or off for later passes."""
        self._enabled = shuffle
        return self

    def set_seed(self, seed: int) -> Self:
        """Seed the next pass."""
        self._seed = seed
        return self
