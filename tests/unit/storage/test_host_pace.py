"""The pace of a throttled host against a store that admits a fixed rate (a token bucket,
as S3 and the benchmarks' proxy do), on a simulated clock: it learns the rate the store
admits and holds just under it, with few throttles once learnt."""

from __future__ import annotations

import asyncio
import types
from dataclasses import dataclass

import pytest

from conveyor.storage import host_limits, host_pace
from conveyor.storage.host_limits import HostLimit


@dataclass
class Clock:
    now: float = 0.0

    def monotonic(self) -> float:
        return self.now


@dataclass
class Bucket:
    """The store: ``rate`` requests a second, bursts of one second's worth."""

    clock: Clock
    rate: float
    tokens: float = 0.0
    at: float = 0.0

    def __post_init__(self) -> None:
        self.tokens = self.rate

    def admit(self, when: float) -> bool:
        self.tokens = min(self.rate, self.tokens + (when - self.at) * self.rate)
        self.at = when
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()

    async def sleep(seconds: float) -> None:
        clock.now += max(0.0, seconds)
        await asyncio.sleep(0)

    for module in (host_pace, host_limits):
        monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(host_pace, "asyncio", types.SimpleNamespace(sleep=sleep))
    return clock


async def _drive(
    limit: HostLimit, store: Bucket, seconds: float, demand: float
) -> list[tuple[float, bool]]:
    """One request after another, ``demand`` a second when nothing holds them back, each
    answered at once: admitted (answered) or throttled."""
    clock = store.clock
    log = []
    while clock.now < seconds:
        async with limit.slot() as sent_at:
            admitted = store.admit(sent_at)
            if admitted:
                limit.answered()
        if not admitted:
            limit.throttled(sent_at)
        log.append((sent_at, admitted))
        clock.now += 1.0 / demand
    return log


@pytest.mark.parametrize("rate", [10.0, 50.0])
def test_the_pace_learns_the_admitted_rate_and_holds_just_under_it(
    clock: Clock, rate: float
) -> None:
    store = Bucket(clock, rate)
    log = asyncio.run(_drive(HostLimit("h"), store, seconds=40.0, demand=4 * rate))
    later = [admitted for sent_at, admitted in log if sent_at >= 5.0]
    seconds = log[-1][0] - 5.0
    # most of what the store allows, once learnt (halving and growing back kept ~0.5-0.75)
    assert sum(later) / seconds >= 0.85 * rate, (sum(later) / seconds, rate)
    # and few throttles: at most one request in 20 asked again
    assert later.count(False) <= 0.05 * sum(later), (later.count(False), sum(later))
