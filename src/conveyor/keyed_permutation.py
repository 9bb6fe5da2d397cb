"""A keyed bijection of ``[0, size)``: the shuffle that never materialises a permutation.

A Feistel network over ``Z_a x Z_b`` (``a = ceil(sqrt(size))``, ``b = ceil(size / a)``, so
``a * b - size < a``) with modular addition instead of XOR, and cycle-walking for the few
values of ``[size, a * b)``. Choosing the radices this tightly, instead of the next power
of two, keeps cycle-walking to a fraction ``< 1 / sqrt(size)`` of the values: the cost per
index is the same for every size (a power-of-two domain costs up to twice as much, and its
vectorised walk many passes, just above a power of two).

Each round maps ``(L, R) -> (R, (L + F_k(R)) mod |L|)``; the radices swap every round, so
an even number of rounds ends on ``(a, b)`` again. ``F_k`` is a multiply-xorshift-multiply
hash of ``R ^ k`` whose top 32 bits are scaled into ``[0, |L|)``. Six rounds pass the
uniformity tests a uniformly random permutation passes (tests/unit/test_keyed_permutation.py,
which also shows the tests reject four rounds or a single multiply); domains of at most
2**16 values use twelve, so that even 3, 4 or 5 values reach every ordering about equally
often over seeds. Everything is vectorised NumPy over ``uint64`` (overflow wraps by design).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["KeyedPermutation", "derive_key", "mix64", "mix64_array"]

Indices = NDArray[np.uint64]
RoundKey = np.uint64 | Indices  # one key for all values, or one per value

MAX_SIZE = 1 << 62
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_SMALL_DOMAIN = 1 << 16
_ROUNDS_LARGE = 6
_ROUNDS_SMALL = 12
_M1 = np.uint64(_GOLDEN)
_M2 = np.uint64(_MIX1)
_S32 = np.uint64(32)


def mix64(value: int) -> int:
    """SplitMix64's finaliser: a bijection of 64-bit integers that scrambles every bit."""
    z = (value + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def mix64_array(values: Indices) -> Indices:
    """`mix64` of every element (a new array)."""
    z = values + np.uint64(_GOLDEN)
    z ^= z >> np.uint64(30)
    z *= np.uint64(_MIX1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_MIX2)
    z ^= z >> np.uint64(31)
    return z


def derive_key(*words: int) -> int:
    """A 64-bit key from any integers (seed, epoch, purpose, ...); every word matters."""
    key = 0
    for word in words:
        key = mix64(key ^ (word & _MASK64))
    return key


def radices(size: int) -> tuple[int, int]:
    """``(a, b)`` with ``a * b >= size`` and ``a * b - size < a``, ``a = ceil(sqrt(size))``."""
    a = math.isqrt(size - 1) + 1 if size > 1 else 1
    return a, -(-size // a)


def round_count(size: int) -> int:
    return _ROUNDS_SMALL if size <= _SMALL_DOMAIN else _ROUNDS_LARGE


def round_keys(size: int, key: int) -> list[int]:
    return [derive_key(key, size, number) for number in range(round_count(size))]


def _round_output(
    right: Indices, key: RoundKey, radix: int, scratch: Indices, spare: Indices
) -> Indices:
    """``F_key(right)`` scaled into ``[0, radix)``, written into ``scratch``."""
    np.bitwise_xor(right, key, out=scratch)
    np.multiply(scratch, _M1, out=scratch)
    np.right_shift(scratch, _S32, out=spare)
    np.bitwise_xor(scratch, spare, out=scratch)
    np.multiply(scratch, _M2, out=scratch)
    np.right_shift(scratch, _S32, out=scratch)
    np.multiply(scratch, np.uint64(radix), out=scratch)
    return np.right_shift(scratch, _S32, out=scratch)


def feistel(values: Indices, a: int, b: int, keys: Sequence[RoundKey]) -> Indices:
    """The network on ``values < a * b`` (a new array)."""
    left, right = np.divmod(values, np.uint64(b))
    scratch = np.empty_like(values)
    spare = np.empty_like(values)
    radix_left, radix_right = a, b
    for key in keys:
        shift = _round_output(right, key, radix_left, scratch, spare)
        np.add(left, shift, out=left)
        np.subtract(left, np.uint64(radix_left), out=spare)
        np.minimum(left, spare, out=left)  # (left + shift) mod radix_left: no branch
        left, right = right, left
        radix_left, radix_right = radix_right, radix_left
    np.multiply(left, np.uint64(b), out=left)
    return np.add(left, right, out=left)


def feistel_inverse(values: Indices, a: int, b: int, keys: Sequence[RoundKey]) -> Indices:
    """The inverse network: ``feistel_inverse(feistel(x)) == x``."""
    left, right = np.divmod(values, np.uint64(b))
    scratch = np.empty_like(values)
    spare = np.empty_like(values)
    rounds = len(keys)
    for number in reversed(range(rounds)):
        radix_left = a if number % 2 == 0 else b  # the radix of L going into this round
        shift = _round_output(left, keys[number], radix_left, scratch, spare)
        np.subtract(right, shift, out=right)
        np.add(right, np.uint64(radix_left), out=spare)
        np.minimum(right, spare, out=right)  # (right - shift) mod radix_left: wraps in uint64
        left, right = right, left
    np.multiply(left, np.uint64(b), out=left)
    return np.add(left, right, out=left)


def _feistel_one(value: int, a: int, b: int, keys: Sequence[int]) -> int:
    """`feistel` for a single value, step for step in Python integers."""
    left, right = divmod(value, b)
    radix_left, radix_right = a, b
    for key in keys:
        mixed = ((right ^ key) * _GOLDEN) & _MASK64
        mixed = ((mixed ^ (mixed >> 32)) * _MIX1) & _MASK64
        shift = ((mixed >> 32) * radix_left) >> 32
        left, right = right, (left + shift) % radix_left
        radix_left, radix_right = radix_right, radix_left
    return left * b + right


def _subset(keys: Sequence[RoundKey], where: NDArray[np.intp]) -> list[RoundKey]:
    return [key[where] if isinstance(key, np.ndarray) else key for key in keys]


def walk(values: Indices, size: int, keys: Sequence[RoundKey], *, inverse: bool = False) -> Indices:
    """Apply the network, again on results ``>= size`` (cycle-walking): a bijection of
    ``[0, size)`` (a new array). ``keys`` hold a scalar or one key per value each."""
    a, b = radices(size)
    network = feistel_inverse if inverse else feistel
    out = network(values, a, b, keys)
    pending = np.flatnonzero(out >= np.uint64(size))
    while pending.size:
        stepped = network(out[pending], a, b, _subset(keys, pending))
        out[pending] = stepped
        pending = pending[stepped >= np.uint64(size)]
    return out


class KeyedPermutation:
    """A permutation of ``range(size)`` chosen by a 64-bit ``key``, evaluated pointwise.

    O(1) memory and O(1) work per position, whatever ``size`` (up to 2**62): position
    ``i`` maps to ``self(i)`` without computing any other position.
    """

    __slots__ = ("_int_keys", "_keys", "_radices", "key", "size")

    def __init__(self, size: int, key: int) -> None:
        if not 0 <= size <= MAX_SIZE:
            raise ValueError(f"size must be in [0, 2**62], got {size}")
        self.size = size
        self.key = key & _MASK64
        self._int_keys = round_keys(size, self.key)
        self._keys = [np.uint64(k) for k in self._int_keys]
        self._radices = radices(size)

    def __call__(self, positions: Indices) -> Indices:
        """The values at ``positions`` (each ``< size``), as a new ``uint64`` array."""
        if positions.size == 0:
            return np.empty(0, dtype=np.uint64)
        return walk(positions, self.size, self._keys)

    def inverse(self, values: Indices) -> Indices:
        """The positions holding ``values`` (each ``< size``)."""
        if values.size == 0:
            return np.empty(0, dtype=np.uint64)
        return walk(values, self.size, self._keys, inverse=True)

    def at(self, position: int) -> int:
        """``self(position)`` for one position, in plain integers (no NumPy call costs)."""
        a, b = self._radices
        value = _feistel_one(position, a, b, self._int_keys)
        while value >= self.size:
            value = _feistel_one(value, a, b, self._int_keys)
        return value

    def position_of(self, value: int) -> int:
        return int(self.inverse(np.array([value], dtype=np.uint64))[0])
