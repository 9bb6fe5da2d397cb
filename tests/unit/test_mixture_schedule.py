"""Mixture schedule: quota at every prefix, window bounds under weight changes, random access."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.mixture.period import period_for
from conveyor.mixture.rates import (
    MAX_PERIOD,
    decode_shares,
    encode_shares,
    rates_from_shares,
    to_rates,
)
from conveyor.mixture.schedule import Schedule

FEW = settings(max_examples=60, deadline=None)

shares_strategy = st.lists(st.integers(0, 60), min_size=1, max_size=16).filter(any)


def one_hot_counts(sources: np.ndarray, num_sources: int) -> np.ndarray:
    """``counts[t, i]``: items of source ``i`` among the first ``t`` positions."""
    hot = np.zeros((sources.size + 1, num_sources), dtype=np.int64)
    hot[np.arange(1, sources.size + 1), sources] = 1
    return np.cumsum(hot, axis=0)


def ideal_counts(rates_per_position: np.ndarray) -> np.ndarray:
    """Exact fluid counts for per-position rates (rows: positions), prefix sums from 0."""
    out = np.zeros((rates_per_position.shape[0] + 1, rates_per_position.shape[1]))
    out[1:] = np.cumsum(rates_per_position, axis=0)
    return out


@FEW
@given(shares=shares_strategy)
def test_every_prefix_of_a_period_is_within_quota(shares: list[int]) -> None:
    period = period_for(tuple(shares))
    total = sum(shares)
    counts = one_hot_counts(period.sources, len(shares))
    ideal = np.outer(np.arange(total + 1), shares) / total
    assert np.abs(counts - ideal).max() < 1
    assert counts[-1].tolist() == shares  # the period ends exactly on the shares


@FEW
@given(shares=shares_strategy, length=st.integers(1, 400))
def test_every_window_is_within_two_and_within_one_when_the_ideal_is_whole(
    shares: list[int], length: int
) -> None:
    schedule = Schedule(rates_from_shares(shares))
    total = sum(shares)
    sources, _ = schedule.locate(0, 3 * total + length)
    counts = one_hot_counts(sources, len(shares))
    windows = counts[length:] - counts[:-length]
    ideal = np.array(shares) * length / total
    assert np.abs(windows - ideal).max() < 2
    whole = (np.array(shares) * length) % total == 0
    assert np.abs(windows - ideal)[:, whole].max(initial=0) <= 1


def test_thousandths_hold_one_sample_per_thousand_in_every_window() -> None:
    weights = [0.5, 0.25, 0.125, 0.07, 0.033, 0.022]
    rates = to_rates(weights)
    assert rates.exact and rates.period == 1000
    sources, _ = Schedule(rates).locate(0, 20_000)
    counts = one_hot_counts(sources, len(weights))
    windows = counts[1000:] - counts[:-1000]
    assert np.abs(windows - np.array(weights) * 1000).max() <= 1  # +-0.1 % everywhere


def test_inexact_weights_are_rounded_to_a_fine_period_and_stay_within_the_bound() -> None:
    weights = [1 / 3, math.pi, math.e, 0.001, 1e-7]
    rates = to_rates(weights)
    assert not rates.exact and MAX_PERIOD % rates.period == 0
    normalised = np.array(weights) / sum(weights)
    assert np.abs(np.array(rates.shares) / rates.period - normalised).max() < 1 / MAX_PERIOD
    assert min(rates.shares) >= 1  # a tiny positive weight still takes part
    sources, _ = Schedule(rates).locate(0, 3 * MAX_PERIOD)
    counts = one_hot_counts(sources, len(weights))
    windows = counts[1000:] - counts[:-1000]
    assert np.abs(windows - normalised * 1000).max() < 2 + 1000 / MAX_PERIOD


@FEW
@given(
    first=shares_strategy,
    changes=st.lists(
        st.tuples(st.integers(1, 700), st.lists(st.integers(0, 40), min_size=16, max_size=16)),
        max_size=4,
    ),
    length=st.sampled_from([7, 100, 1000]),
)
def test_windows_across_weight_changes_stay_within_two_plus_the_changes_they_span(
    first: list[int], changes: list[tuple[int, list[int]]], length: int
) -> None:
    m = len(first)
    schedule = Schedule(rates_from_shares(first))
    starts = [0]
    vectors = [np.array(first) / sum(first)]
    for gap, all_shares in changes:
        shares = all_shares[:m]
        vector = np.array(shares) / max(1, sum(shares))
        if not any(shares) or np.array_equal(vector, vectors[-1]):
            continue  # all zero is refused; the same proportions add no segment
        starts.append(starts[-1] + gap)
        schedule.change(starts[-1], rates_from_shares(shares))
        vectors.append(vector)
    end = starts[-1] + 2 * length + 500
    sources, _ = schedule.locate(0, end)
    per_position = np.empty((end, m))
    bounds = [*starts, end]
    for j, vector in enumerate(vectors):
        per_position[bounds[j] : bounds[j + 1]] = vector
    counts, ideal = one_hot_counts(sources, m), ideal_counts(per_position)
    # Each segment alone: every prefix within 1, so every window within 2.
    for j in range(len(vectors)):
        a, b = bounds[j], bounds[j + 1]
        assert np.abs((counts[a : b + 1] - counts[a]) - (ideal[a : b + 1] - ideal[a])).max() < 1
    # A window spanning c changes: within 2 + c.
    for a in range(0, end - length + 1, max(1, length // 7)):
        spanned = sum(1 for s in starts[1:] if a < s < a + length)
        deviation = np.abs((counts[a + length] - counts[a]) - (ideal[a + length] - ideal[a]))
        assert deviation.max() < 2 + spanned


@FEW
@given(first=shares_strategy, change_at=st.integers(0, 300), second=shares_strategy)
def test_random_access_agrees_with_the_sequence(
    first: list[int], change_at: int, second: list[int]
) -> None:
    m = max(len(first), len(second))
    first, second = first + [0] * (m - len(first)), second + [0] * (m - len(second))
    schedule = Schedule(rates_from_shares(first))
    schedule.change(change_at, rates_from_shares(second))
    sources, items = schedule.locate(0, 900)
    counts = one_hot_counts(sources, m)
    # Item numbers are running counts per source, so each source's items are 0, 1, 2, ...
    assert np.array_equal(items, counts[np.arange(900), sources])
    for start, stop in [(0, 1), (5, 400), (change_at, change_at + 3), (899, 900)]:
        part_sources, part_items = schedule.locate(start, stop)
        assert np.array_equal(part_sources, sources[start:stop])
        assert np.array_equal(part_items, items[start:stop])
    for position in (0, 1, change_at, 450, 899):
        assert schedule.source_at(position) == sources[position]
        assert np.array_equal(schedule.counts_before(position), counts[position])
    for position in range(0, 900, 37):
        assert schedule.position_of(int(sources[position]), int(items[position])) == position


def test_a_source_without_share_never_comes() -> None:
    schedule = Schedule(rates_from_shares([1, 0]))
    assert schedule.position_of(1, 0) is None
    schedule.change(10, rates_from_shares([1, 1]))
    assert schedule.position_of(1, 0) is not None and schedule.position_of(1, 0) >= 10


def test_changes_are_recorded_in_order_and_merged_when_they_repeat() -> None:
    schedule = Schedule(rates_from_shares([1, 1]))
    schedule.change(10, rates_from_shares([1, 1]))  # same weights: no new segment
    assert len(schedule.segments) == 1
    schedule.change(10, rates_from_shares([2, 1]))
    schedule.change(10, rates_from_shares([3, 1]))  # same position: replaces
    assert [s.rates.shares for s in schedule.segments] == [(1, 1), (3, 1)]
    with pytest.raises(ValueError, match="before the last one"):
        schedule.change(5, rates_from_shares([1, 2]))


def test_weights_are_read_as_exact_rationals() -> None:
    assert to_rates([0.1, 0.2, 0.7]).shares == (1, 2, 7)
    assert to_rates([3, 1]).shares == (3, 1)
    assert to_rates([Fraction(1, 3), Fraction(2, 3)]).shares == (1, 2)
    assert to_rates([0, 5]).shares == (0, 1)
    for bad, error in [([], ValueError), ([0, 0], ValueError), ([-1, 2], ValueError)]:
        with pytest.raises(error):
            to_rates(bad)
    with pytest.raises(ValueError, match="finite"):
        to_rates([float("nan"), 1])
    with pytest.raises(TypeError, match="number"):
        to_rates([True, 1])  # type: ignore[list-item]


@FEW
@given(shares=st.lists(st.integers(0, 2**40), max_size=300))
def test_shares_encode_and_decode(shares: list[int]) -> None:
    text = encode_shares(shares)
    assert text.isascii() and decode_shares(text) == tuple(shares)
