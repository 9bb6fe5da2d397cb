"""The keyed bijection under GlobalShuffleSampler: a permutation, invertible, and random-looking."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.keyed_permutation import (
    KeyedPermutation,
    derive_key,
    mix64,
    mix64_array,
    radices,
    round_keys,
    walk,
)
from uniformity import (
    REJECT_Z,
    chi_square_z,
    sampled_displacement_z,
    worst_z,
)

AWKWARD = [2**16 - 1, 2**16, 2**16 + 1, 65_537 * 3, 2**17 + 1, 99_991, 100_489, 100_490]


def whole(size: int, key: int) -> np.ndarray:
    return KeyedPermutation(size, key)(np.arange(size, dtype=np.uint64)).astype(np.int64)


@pytest.mark.parametrize("size", [*range(301), *AWKWARD])
def test_every_size_is_a_bijection_with_an_inverse(size: int) -> None:
    perm = KeyedPermutation(size, key=size * 7919 + 1)
    positions = np.arange(size, dtype=np.uint64)
    values = perm(positions)
    assert np.array_equal(np.sort(values), positions)
    assert np.array_equal(perm.inverse(values), positions)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100, 2**16 + 1, 10**6, 2**40 + 3, 2**62])
def test_one_position_in_plain_integers_agrees_with_the_vectorised_network(size: int) -> None:
    perm = KeyedPermutation(size, key=size)
    positions = sorted({0, size // 3, size // 2, size - 1, *range(min(size, 50))})
    vectorised = perm(np.array(positions, dtype=np.uint64)).tolist()
    assert [perm.at(p) for p in positions] == vectorised
    assert [perm.position_of(v) for v in vectorised] == positions


def test_radices_cover_the_domain_tightly() -> None:
    for size in [*range(1, 2000), 2**40, 2**40 + 1, 2**62]:
        a, b = radices(size)
        assert a * b >= size > a * b - a  # cycle-walking visits < 1/sqrt(size) of values
        assert a < 2**32 and b < 2**32


@settings(max_examples=40, deadline=None)
@given(exponent=st.integers(20, 62), offset=st.integers(0, 2**19), key=st.integers(0, 2**64 - 1))
def test_huge_sizes_map_a_sample_into_range_distinctly(
    exponent: int, offset: int, key: int
) -> None:
    size = 2**exponent - offset
    perm = KeyedPermutation(size, key)
    positions = np.unique(np.random.default_rng(key % 2**32).integers(0, size, 5000, np.uint64))
    values = perm(positions)
    assert int(values.max()) < size
    assert np.unique(values).size == positions.size
    assert np.array_equal(perm.inverse(values), positions)


def test_mix64_vectorised_matches_scalar() -> None:
    words = [0, 1, 2**63, 2**64 - 1, 123_456_789]
    mixed = mix64_array(np.array(words, dtype=np.uint64)).tolist()
    assert mixed == [mix64(w) for w in words]
    assert len({derive_key(1, 2), derive_key(2, 1), derive_key(1, 2, 0)}) == 3


@pytest.mark.parametrize("size", [1000, 10_007, 65_536, 100_003, 1_000_000])
def test_permutations_pass_the_uniformity_checks(size: int) -> None:
    for seed in range(4):
        assert worst_z(whole(size, derive_key(seed))) < REJECT_Z, (size, seed)


@pytest.mark.parametrize("size", [1000, 100_003])
def test_the_checks_are_calibrated_on_reference_shuffles(size: int) -> None:
    for seed in range(4):
        assert worst_z(np.random.default_rng(seed).permutation(size)) < REJECT_Z
        generator = torch.Generator().manual_seed(seed)
        assert worst_z(torch.randperm(size, generator=generator).numpy()) < REJECT_Z


def test_the_checks_reject_a_network_with_too_few_rounds() -> None:
    # The same network cut to two rounds is plainly structured, and four rounds are caught
    # too at this size: the checks have the power to fail.
    size = 1_000_000
    positions = np.arange(size, dtype=np.uint64)

    def cut(key: int, rounds: int) -> np.ndarray:
        keys = [np.uint64(k) for k in round_keys(size, key)][:rounds]
        return walk(positions, size, keys).astype(np.int64)

    assert min(worst_z(cut(key, 2)) for key in range(3)) > 10 * REJECT_Z
    assert max(worst_z(cut(key, 4)) for key in range(3)) > REJECT_Z
    assert max(worst_z(cut(key, 6)) for key in range(3)) < REJECT_Z


def test_identity_and_rotations_are_rejected() -> None:
    size = 10_007
    assert worst_z(np.arange(size)) > REJECT_Z
    assert worst_z((np.arange(size) * 7 + 3) % size) > REJECT_Z


@pytest.mark.parametrize("size", [2**40, 2**40 + 1, 3 * 2**45 + 17])
def test_huge_permutations_displace_uniformly(size: int) -> None:
    rng = np.random.default_rng(size % 1000)
    positions = rng.integers(0, size, 200_000, dtype=np.int64)
    values = KeyedPermutation(size, 99)(positions.astype(np.uint64)).astype(np.int64)
    assert sampled_displacement_z(positions, values, size) < REJECT_Z
    runs = np.arange(2**30, 2**30 + 200_000, dtype=np.int64)  # consecutive positions too
    values = KeyedPermutation(size, 99)(runs.astype(np.uint64)).astype(np.int64)
    assert sampled_displacement_z(runs, values, size) < REJECT_Z


@pytest.mark.parametrize("size", [3, 4, 5])
def test_tiny_sizes_reach_every_ordering_about_equally_often(size: int) -> None:
    orderings = list(itertools.permutations(range(size)))
    draws = 40 * len(orderings)
    counts = dict.fromkeys(orderings, 0)
    for seed in range(draws):
        counts[tuple(whole(size, derive_key(seed)).tolist())] += 1
    observed = np.array(list(counts.values()), dtype=np.float64)
    expected = np.full(len(orderings), draws / len(orderings))
    assert min(observed) > 0
    assert chi_square_z(observed, expected, len(orderings) - 1) < REJECT_Z


def test_different_keys_give_different_orders() -> None:
    for size in (50, 10_000):
        orders = {tuple(whole(size, key).tolist()) for key in range(20)}
        assert len(orders) == 20
    # ... and a different order is not a shifted copy of another.
    a, b = whole(10_000, 1), whole(10_000, 2)
    assert math.isclose(np.mean(a == b), 0.0, abs_tol=0.002)
