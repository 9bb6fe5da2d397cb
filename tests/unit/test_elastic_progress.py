"""Elastic progress (conveyor.state.elastic): merged and re-split on any number of
consumers, every item of every unit is read exactly once, over several resumes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.state.elastic import Pending, consumer_progress, fresh_progress, merge


def run_generation(
    progress: dict[str, Any], sizes: list[int], consumers: int, budgets: list[int] | None
) -> tuple[list[tuple[int, int]], list[dict[str, Any] | None]]:
    """Each consumer reads up to ``budget`` items of its share (None: to the end).
    Returns the items read ``(unit, item)`` and each consumer's checkpoint."""
    pending = Pending(progress, len(sizes))
    read: list[tuple[int, int]] = []
    states: list[dict[str, Any] | None] = []
    for consumer in range(consumers):
        budget = None if budgets is None else budgets[consumer]
        index, offset, taken = 0, 0, 0
        for position, start in pending.share(consumer, consumers):
            offset = start
            while offset < sizes[position] and (budget is None or taken < budget):
                read.append((position, offset))
                offset += 1
                taken += 1
            if offset < sizes[position]:
                break
            index, offset = index + 1, 0
        if taken == 0 and budget == 0:
            states.append(None)  # delivered nothing: the loader keeps no state for it
        else:
            states.append(dict(consumer_progress(progress, consumers, consumer, index, offset)))
    return read, states


topologies = st.lists(
    st.tuples(st.integers(1, 6), st.lists(st.integers(0, 9), min_size=6, max_size=6)),
    min_size=0,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 7), min_size=0, max_size=30),
    generations=topologies,
    last=st.integers(1, 6),
)
def test_every_item_once_across_resumes_on_any_topology(
    sizes: list[int], generations: list[tuple[int, list[int]]], last: int
) -> None:
    progress: dict[str, Any] = dict(fresh_progress({"units": len(sizes)}))
    seen: list[tuple[int, int]] = []
    for consumers, budgets in generations:
        read, states = run_generation(progress, sizes, consumers, budgets[:consumers])
        seen += read
        merged = merge(states)
        if merged is not None:
            progress = json.loads(json.dumps(merged))  # JSON-serialisable, as checkpoints are
    read, _ = run_generation(progress, sizes, last, None)
    seen += read
    expected = [(unit, item) for unit, size in enumerate(sizes) for item in range(size)]
    assert sorted(seen) == expected  # every item, none twice


def test_progress_stays_small_when_consumers_advance_in_step() -> None:
    sizes = [5] * 10_000
    progress: dict[str, Any] = dict(fresh_progress({"units": len(sizes)}))
    for consumers in (8, 5, 12, 3):
        _, states = run_generation(progress, sizes, consumers, [2_000 + c for c in range(12)])
        merged = merge(states)
        assert merged is not None
        progress = dict(merged)
        assert len(progress["done"]) + len(progress["partial"]) <= 2 * consumers
    assert len(json.dumps(progress)) < 600


def test_pending_random_access_matches_a_scan() -> None:
    progress = {
        "elastic": 1,
        "identity": {"units": 40},
        "below": 5,
        "done": [7, 8, 20],
        "partial": [[6, 2], [30, 1]],
    }
    pending = Pending(progress, 40)
    tail = [p for p in range(5, 40) if p not in {6, 7, 8, 20, 30}]
    assert [pending[i] for i in range(len(pending))] == [6, 30, *tail]
    assert list(pending.share(1, 3)) == [(30, 1)] + [(p, 0) for p in tail[2::3]]


def test_merge_refuses_checkpoints_of_different_splits() -> None:
    base = dict(fresh_progress({"units": 10}))
    one = dict(consumer_progress(base, 2, 0, 1, 0))
    other = dict(consumer_progress(base, 3, 1, 1, 0))
    with pytest.raises(ValueError, match="consumers"):
        merge([one, other])
    again = dict(consumer_progress(base, 2, 0, 2, 0))
    with pytest.raises(ValueError, match="consumer 0 of 2 twice"):
        merge([one, again])
    later = dict(consumer_progress(dict(fresh_progress({"units": 11})), 2, 1, 0, 0))
    with pytest.raises(ValueError, match="identity"):
        merge([one, later])
