"""Mixture weights as integer shares of a period: what the schedule can follow exactly.

A weight vector becomes ``shares`` summing to ``period``: source ``i`` takes exactly
``shares[i]`` of every ``period`` consecutive positions of its schedule. Weights are read
as exact rationals (an ``int`` as itself, a ``float`` as the decimal it prints as, so
``0.1`` is 1/10, or a `fractions.Fraction`); when the normalised weights share a common
denominator of at most `MAX_PERIOD`, the shares are exact. Otherwise they are rounded to
multiples of ``1 / MAX_PERIOD`` (largest remainders; every positive weight keeps at least
one share), an error below ``1 / MAX_PERIOD`` per source: 0.015 samples per 1,000.
"""

from __future__ import annotations

import base64
import hashlib
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["MAX_PERIOD", "Rates", "decode_shares", "encode_shares", "to_rates"]

MAX_PERIOD = 1 << 16

Weight = int | float | Fraction


@dataclass(frozen=True)
class Rates:
    """Integer shares of a period; ``exact`` when they equal the normalised weights."""

    shares: tuple[int, ...]
    period: int
    exact: bool

    @property
    def digest(self) -> str:
        """A short fingerprint of the shares (identifies a weight vector in checkpoints)."""
        return _digest(encode_shares(self.shares))


def to_rates(weights: Sequence[Weight], *, max_period: int = MAX_PERIOD) -> Rates:
    """Normalise ``weights`` (non-negative, not all zero) into integer shares of a period."""
    exact = [_exact(w, position) for position, w in enumerate(weights)]
    total = sum(exact, Fraction(0))
    if total == 0:
        raise ValueError("Mixture weights must not all be zero")
    normalised = [w / total for w in exact]
    period = math.lcm(*(w.denominator for w in normalised))
    if period <= max_period:
        shares = tuple(int(w * period) for w in normalised)
        return Rates(shares, period, exact=True)
    rounded = rates_from_shares(_rounded(normalised, max_period))
    return Rates(rounded.shares, rounded.period, exact=False)


def _exact(weight: Weight, position: int) -> Fraction:
    if isinstance(weight, bool) or not isinstance(weight, int | float | Fraction):
        raise TypeError(f"Mixture weight {position} must be a number, got {weight!r}")
    if isinstance(weight, float) and not math.isfinite(weight):
        raise ValueError(f"Mixture weight {position} must be finite, got {weight!r}")
    value = Fraction(repr(weight)) if isinstance(weight, float) else Fraction(weight)
    if value < 0:
        raise ValueError(f"Mixture weight {position} must be >= 0, got {weight!r}")
    return value


def _rounded(normalised: Sequence[Fraction], period: int) -> tuple[int, ...]:
    """Largest-remainder rounding to ``period`` shares; positive weights keep one share."""
    scaled = [w * period for w in normalised]
    shares = [math.floor(s) for s in scaled]
    by_remainder = sorted(range(len(scaled)), key=lambda i: (shares[i] - scaled[i], i))
    for i in by_remainder[: period - sum(shares)]:
        shares[i] += 1
    for i, weight in enumerate(normalised):
        if weight > 0 and shares[i] == 0:
            shares[i] = 1
            shares[max(range(len(shares)), key=lambda j: (shares[j], -j))] -= 1
    return tuple(shares)


def encode_shares(shares: Sequence[int]) -> str:
    """Shares as compact ASCII: LEB128 varints, zlib, URL-safe base64."""
    raw = bytearray()
    for share in shares:
        rest = share
        while True:
            byte, rest = rest & 0x7F, rest >> 7
            raw.append(byte | (0x80 if rest else 0))
            if not rest:
                break
    return base64.urlsafe_b64encode(zlib.compress(bytes(raw), 9)).decode("ascii")


def decode_shares(text: str) -> tuple[int, ...]:
    raw = zlib.decompress(base64.urlsafe_b64decode(text.encode("ascii")))
    shares: list[int] = []
    value = shift = 0
    for byte in raw:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            shares.append(value)
            value = shift = 0
    return tuple(shares)


def rates_from_shares(shares: Sequence[int]) -> Rates:
    """`Rates` following integer shares exactly (reduced by their common divisor, as
    `to_rates` does, so equal proportions give equal rates)."""
    if any(share < 0 for share in shares) or not any(shares):
        raise ValueError(f"shares must be >= 0 and not all zero, got {list(shares)}")
    divisor = math.gcd(*shares)
    return Rates(tuple(share // divisor for share in shares), sum(shares) // divisor, exact=True)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("ascii"), digest_size=8).hexdigest()
