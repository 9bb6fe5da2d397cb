"""When a request is hedged: late enough that ordinary requests leave budget for the late,
early enough that a few outliers in the window do not hold a late request back."""

from __future__ import annotations

import random

import pytest

from conveyor.storage.hedging import LATE_FACTOR, HedgeStats

SPAN = 8 << 20


def _late_ones_hedged(seed: int) -> tuple[int, int, int]:
    """2,000 first-byte times: most at 10 ms, 5 % ordinary but slower (20-30 ms), 1 % 50x
    late; each request hedged when its first byte is past the delay and a token is left."""
    rng = random.Random(seed)
    stats = HedgeStats()
    hedged = late = late_hedged = 0
    for _ in range(2000):
        draw = rng.random()
        seconds = 0.5 if draw < 0.01 else rng.uniform(0.02, 0.03) if draw < 0.06 else 0.01
        stats.earn(0.05)
        delay = stats.delay(SPAN)
        fired = delay is not None and seconds > delay and stats.spend()
        hedged += fired
        late += seconds == 0.5
        late_hedged += fired and seconds == 0.5
        stats.record(SPAN, seconds)
    return hedged, late, late_hedged


def test_the_late_requests_find_budget_left_and_the_hedges_stay_within_it() -> None:
    for seed in range(3):
        hedged, late, late_hedged = _late_ones_hedged(seed)
        assert hedged <= 0.05 * 2000 + 4  # the budget, plus the first burst's tokens
        assert late_hedged >= 0.9 * late, (seed, late_hedged, late)


def _late_waits(seed: int, stalls: bool) -> tuple[list[float], int]:
    """The delays after which the late requests of a stream were hedged, and the hedges sent.

    4,000 first-byte times: 10 ms ordinarily (1 ms of jitter), 1 % 50x late; the first 8 open
    connections (35x); with ``stalls``, every 500 requests the 8 in flight are all held 200 ms
    at once (a pause of the whole client: a full garbage collection)."""
    rng = random.Random(seed)
    stats = HedgeStats()
    waits: list[float] = []
    hedged = 0
    for index in range(4000):
        seconds = rng.uniform(0.009, 0.011)
        if index < 8:
            seconds = 0.35
        elif stalls and index % 500 < 8:
            seconds += 0.2
        late = rng.random() < 0.01
        seconds = 0.5 if late else seconds
        stats.earn(0.05)
        delay = stats.delay(SPAN)
        if delay is not None and seconds > delay and stats.spend():
            hedged += 1
            if late:
                waits.append(delay)
            seconds = min(seconds, delay + 0.01)  # the hedge's answer, if it came first
        stats.record(SPAN, seconds)
    return waits, hedged


@pytest.mark.parametrize("stalls", [False, True])
def test_a_few_outliers_in_the_window_do_not_hold_the_late_requests_back(stalls: bool) -> None:
    """The connections' first requests, or 8 requests caught in one stall, are the 7 largest
    of 256 times: the 97.5th percentile was theirs (200-350 ms on a 10 ms median) for the next
    256 requests, and a late request in that stretch waited that long before its hedge. The
    delay is now at most 3 medians, and the budget still bounds the hedges."""
    for seed in range(3):
        waits, hedged = _late_waits(seed, stalls)
        assert len(waits) >= 0.9 * 40, (seed, len(waits))  # ~40 late requests, nearly all hedged
        assert max(waits) <= LATE_FACTOR * 0.011, (seed, sorted(waits)[-5:])
        assert hedged <= 0.05 * 4000 + 4


def test_after_outliers_the_delay_is_three_medians() -> None:
    stats = HedgeStats()
    for _ in range(240):
        stats.record(SPAN, 0.010)
    for _ in range(8):  # one stall: 8 requests in flight held 200 ms (3 % of the window)
        stats.record(SPAN, 0.21)
    assert stats.delay(SPAN) == pytest.approx(LATE_FACTOR * 0.010)


def test_a_wide_ordinary_spread_is_left_to_the_percentile() -> None:
    """10 % of the requests at 2-2.8 medians: the 97.5th percentile (~2.7 medians) is below
    the ceiling and stays the delay, so those ordinary requests are not hedged earlier."""
    rng = random.Random(0)
    stats = HedgeStats()
    times = [0.010 if rng.random() < 0.9 else rng.uniform(0.020, 0.028) for _ in range(256)]
    for seconds in times:
        stats.record(SPAN, seconds)
    expected = sorted(times)[int(0.975 * 256)]
    assert expected < LATE_FACTOR * 0.010
    assert stats.delay(SPAN) == expected


def test_the_budget_bounds_the_hedges_when_a_third_of_requests_pass_the_ceiling() -> None:
    """Hedges at 3 medians when every third request is late: the tokens, not the delay,
    bound them."""
    rng = random.Random(1)
    stats = HedgeStats()
    hedged = 0
    for _ in range(2000):
        seconds = 0.2 if rng.random() < 1 / 3 else 0.010
        stats.earn(0.05)
        delay = stats.delay(SPAN)
        hedged += delay is not None and seconds > delay and stats.spend()
        stats.record(SPAN, seconds)
    assert 0.04 * 2000 <= hedged <= 0.05 * 2000 + 4
