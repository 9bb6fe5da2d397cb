"""Statistical checks that a permutation looks uniformly random (shared by unit tests).

Each check returns a z-score (Wilson-Hilferty transform of a chi-square statistic): about
N(0, 1) for a uniformly random permutation, large for a structured one. The tests use
fixed seeds, so a check passes or fails deterministically; they are calibrated on
``numpy``'s and ``torch``'s own shuffles and shown to reject weak permutations.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

REJECT_Z = 4.75  # one-sided p of about 1e-6
BUCKETS = 50


def chi_square_z(observed: NDArray[np.float64], expected: NDArray[np.float64], dof: int) -> float:
    chi = float(((observed - expected) ** 2 / expected).sum())
    ratio = (chi / dof) ** (1 / 3)
    return (ratio - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))


def _uniform_buckets_z(values: NDArray[np.int64], modulus: int) -> float:
    """``values`` in ``[0, modulus)`` spread evenly over ``BUCKETS`` buckets?"""
    buckets = values * BUCKETS // modulus
    observed = np.bincount(buckets, minlength=BUCKETS).astype(np.float64)
    widths = np.diff(-(-np.arange(BUCKETS + 1) * modulus // BUCKETS)).astype(np.float64)
    return chi_square_z(observed, widths * values.size / modulus, BUCKETS - 1)


def displacement_z(order: NDArray[np.int64]) -> float:
    """``(order[i] - i) mod n``: uniform over ``[0, n)`` for a random permutation."""
    n = order.size
    return _uniform_buckets_z((order - np.arange(n)) % n, n)


def lag_z(order: NDArray[np.int64], lag: int = 1) -> float:
    """``(order[i + lag] - order[i]) mod n``: with lag 1, what a reader of the sequence
    sees; with lag ``~sqrt(n)``, pairs that share one half of a Feistel network's input."""
    n = order.size
    return _uniform_buckets_z((order[lag:] - order[:-lag]) % n, n)


def position_value_z(order: NDArray[np.int64], cells: int = 20) -> float:
    """Independence of position and value, on a ``cells x cells`` contingency table."""
    n = order.size
    rows = np.arange(n) * cells // n
    cols = order * cells // n
    observed = np.bincount(rows * cells + cols, minlength=cells * cells).astype(np.float64)
    margin = np.bincount(rows, minlength=cells).astype(np.float64)
    expected = np.outer(margin, margin).ravel() / n
    return chi_square_z(observed, expected, (cells - 1) ** 2)


def worst_z(order: NDArray[np.int64]) -> float:
    """The largest z of all checks (lags 1, 2 and about sqrt(n))."""
    lags = {1, 2, math.isqrt(order.size - 1) + 1}
    lagged = [lag_z(order, lag) for lag in sorted(lags) if lag < order.size]
    return max(displacement_z(order), position_value_z(order), *lagged)


def sampled_displacement_z(
    positions: NDArray[np.int64], values: NDArray[np.int64], n: int
) -> float:
    """Displacement of a sample of positions of a permutation too large to build."""
    return _uniform_buckets_z((values - positions) % n, n)
