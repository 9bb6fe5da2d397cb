"""When a request is hedged: late enough that ordinary requests leave budget for the late."""

from __future__ import annotations

import random

from conveyor.storage.hedging import HedgeStats

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
