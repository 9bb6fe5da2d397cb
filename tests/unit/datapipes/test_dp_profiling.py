"""profile_pipeline names the slowest stage and leaves the graph unchanged."""

from __future__ import annotations

import time

from conveyor.datapipes.iter import IterableWrapper
from conveyor.datapipes.profiling import profile_pipeline


def _slow(x: int) -> int:
    deadline = time.perf_counter() + 0.002  # a stage that costs 2 ms per item
    while time.perf_counter() < deadline:
        pass
    return x


def test_slowest_stage_is_found_and_items_are_counted() -> None:
    dp = IterableWrapper(range(50)).map(_slow).filter(lambda x: x % 2 == 0).batch(5)
    profile = profile_pipeline(dp, max_items=3)
    assert profile.items == 3
    slowest = profile.slowest()
    assert slowest is not None and slowest.name == "Mapper"
    assert slowest.items == 29  # 3 batches of 5 even numbers: 0, 2, ..., 28
    assert slowest.self_s >= 29 * 0.002
    assert "slowest stage: Mapper" in profile.summary()
    by_name = {s.name: s for s in profile.stages}
    assert by_name["Batcher"].items == 3
    assert by_name["Filter"].self_s < slowest.self_s


def test_pipeline_works_normally_afterwards() -> None:
    dp = IterableWrapper(range(6)).map(_slow)
    profile_pipeline(dp, max_items=2)
    assert "nonblocking_next" not in vars(dp)
    assert list(dp) == list(range(6))
