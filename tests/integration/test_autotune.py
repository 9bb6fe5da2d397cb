"""autotune=True with real workers: same batches as a fixed loader, exact resume, and it
adds workers when the loop waits and retires them when it does not.

The trainer is simulated as the scenario itself: a step of fixed duration (the loop
blocked in ``time.sleep``, as it is on a GPU step) alternating with ``next()``; the
dataset's items cost a fixed time the same way (I/O latency). Decisions are counted from
``stats().decisions``, never timed.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import torch

from conveyor import AutotuneOptions, DataLoader


class Latency:
    """Items that take ``cost_s`` each to fetch (an object store's latency)."""

    def __init__(self, n: int, cost_s: float) -> None:
        self.n, self.cost_s = n, cost_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        time.sleep(self.cost_s)
        return i


def _train(loader: DataLoader[Any], step_s: float, batches: int | None = None) -> list[Any]:
    out = []
    for batch in loader:
        out.append(batch.tolist())
        time.sleep(step_s)  # the training step
        if batches is not None and len(out) == batches:
            break
    return out


def _loader(autotune: Any, worker_type: str = "process", **kwargs: Any) -> DataLoader[Any]:
    return DataLoader(
        Latency(96, 0.004),
        batch_size=2,
        shuffle=True,
        generator=torch.Generator().manual_seed(7),
        num_workers=2,  # this machine's CPUs: more process workers warn
        worker_type=worker_type,
        autotune=autotune,
        **kwargs,
    )


def _one_per_batch(data: Latency, options: AutotuneOptions, *, num_workers: int) -> DataLoader[Any]:
    """Batches of one sample from up to ``num_workers`` thread workers, tuned by ``options``."""
    return DataLoader(
        data, batch_size=1, num_workers=num_workers, worker_type="thread", autotune=options
    )


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_autotune_delivers_the_fixed_loader_s_batches_in_its_order(worker_type: str) -> None:
    fixed = _train(_loader(False, worker_type), 0.0)
    tuned_loader = _loader(AutotuneOptions(initial_workers=1, window_batches=4), worker_type)
    tuned = _train(tuned_loader, 0.001)
    assert tuned == fixed
    assert tuned_loader.stats().decisions  # it changed something, yet the batches are the same
    assert tuned_loader.num_workers == 2 and isinstance(tuned_loader.num_workers, int)


def test_resume_with_autotune_is_exact() -> None:
    options = AutotuneOptions(initial_workers=1, window_batches=4)
    reference = _train(_loader(options), 0.0)
    loader = _loader(options)
    got = _train(loader, 0.001, batches=20)
    assert loader.stats().decisions  # the checkpoint is taken after a change
    state = loader.state_dict()
    resumed = _loader(options)
    resumed.load_state_dict(state)
    assert got + _train(resumed, 0.0) == reference


def test_it_adds_workers_while_the_loop_waits(caplog: pytest.LogCaptureFixture) -> None:
    """Items cost 20 ms of latency, the step 4 ms: one worker makes the loop wait."""
    options = AutotuneOptions(initial_workers=1, window_batches=6)
    loader = _one_per_batch(Latency(160, 0.02), options, num_workers=4)
    with caplog.at_level(logging.INFO, logger="conveyor.autotune"):
        _train(loader, 0.004)
    decisions = loader.stats().decisions
    assert decisions and decisions[0].active_workers > 1
    assert max(d.active_workers for d in decisions) == 4
    assert any("autotune: " in r.getMessage() for r in caplog.records)
    assert len(caplog.records) == len(decisions)  # one log line per change


def test_it_retires_workers_while_the_loop_does_not_wait() -> None:
    """Items are free, the step takes 10 ms: one worker keeps up, so three retire."""
    options = AutotuneOptions(initial_workers=4, window_batches=6)
    loader = _one_per_batch(Latency(120, 0.0), options, num_workers=4)
    _train(loader, 0.01)
    decisions = loader.stats().decisions
    actives = [d.active_workers for d in decisions]
    assert actives == [1]  # in one move, to the one needed
    assert decisions[0].reason.startswith("no wait")


def test_autotune_needs_workers() -> None:
    with pytest.raises(ValueError, match="num_workers > 0"):
        DataLoader(Latency(4, 0.0), autotune=True)


def test_persistent_workers_keep_the_tuner_across_epochs_and_the_batches() -> None:
    options = AutotuneOptions(initial_workers=1, window_batches=4)
    fixed = _loader(False, "thread", persistent_workers=True)
    tuned = _loader(options, "thread", persistent_workers=True)
    for epoch in range(2):
        assert _train(tuned, 0.001) == _train(fixed, 0.0)
        if epoch == 0:
            assert tuned.stats().decisions  # the second epoch starts from what it chose


def test_it_decides_from_the_first_batches_not_after_full_windows() -> None:
    """One worker, 20 ms items, a 4 ms step: the loop waits from the start, so the first
    change comes within a few batches and takes the workers to the pace needed at once."""
    options = AutotuneOptions(initial_workers=1)  # window_batches: the default 8
    loader = _one_per_batch(Latency(48, 0.02), options, num_workers=6)
    _train(loader, 0.004)
    first = loader.stats().decisions[0]
    assert first.batch <= 4 and first.active_workers >= 4, first


def test_after_the_step_halves_it_adds_workers_and_then_holds_within_one() -> None:
    """10 ms items; the step goes from 6 ms to 3 ms half way: more workers are needed."""
    loader = _one_per_batch(Latency(240, 0.01), AutotuneOptions(initial_workers=2), num_workers=8)
    for index, _batch in enumerate(loader):
        time.sleep(0.006 if index < 120 else 0.003)
    decisions = loader.stats().decisions
    before = [d.active_workers for d in decisions if d.batch < 120] or [2]
    later = [d for d in decisions if d.batch >= 120]
    assert later and later[-1].active_workers > before[-1]
    # the workers taking tasks over the last quarter: no oscillation beyond one worker
    at_tail = [d.active_workers for d in decisions if d.batch < 180][-1:]
    tail = at_tail + [d.active_workers for d in decisions if d.batch >= 180]
    assert max(tail) - min(tail) <= 1, decisions
