"""Autotune's controller on synthetic counters (no workers, no clocks)."""

from __future__ import annotations

import logging

import pytest

from conveyor import AutotuneOptions
from conveyor.engine.loop.autotune import Tuner, autotune_options, available_cpus
from conveyor.engine.loop.in_flight import RoundRobin
from conveyor.stats.counters import StepClock
from conveyor.stats.requests import RequestCounts


def _window(
    tuner: Tuner,
    clock: StepClock,
    batches: int,
    wait_s: float,
    step_s: float,
    busy_s: float,
    cpu: float = 1.0,
    ready: bool = False,
    requests: int = 0,
    answers: bool = True,
) -> None:
    """``batches`` more batches, each observed: each waited ``wait_s`` and computed
    ``step_s``; each task kept a worker busy ``busy_s`` (``cpu`` of it on a CPU) and made
    ``requests`` remote requests; ``ready``: already there; ``answers``: False, no worker
    answered in these batches (workers started together answer in bursts)."""
    for _ in range(batches):
        clock.queue_seen(ready, 1)
        clock.batches += 1
        clock.wait_s += wait_s
        clock.ready_wait_s += wait_s if ready else 0.0
        clock.compute_s += step_s
        if answers:
            clock.worker_did(0, busy_s, busy_s * cpu)
        clock.requests = RequestCounts(clock.requests.requests + requests)
        tuner.observe(clock)


def _run(tuner: Tuner, clock: StepClock, windows: int, **window: float) -> list[int]:
    """``windows`` times ``window_batches`` batches; the active workers after each."""
    actives = []
    for _ in range(windows):
        _window(tuner, clock, tuner.options.window_batches, **window)  # type: ignore[arg-type]
        actives.append(tuner.active)
    return actives


def test_the_loop_waits_so_it_adds_the_workers_the_step_needs_from_the_first_batches() -> None:
    tuner = Tuner(AutotuneOptions(initial_workers=1, cpu_budget=16), 8, 2, True)
    clock = StepClock()
    # 40 ms of work per batch, a 10 ms step: 40 * 1.2 / 10 -> 5 workers, decided after the
    # start-up batch and a quarter window (the loop may be short: it hurries)
    _window(tuner, clock, 2, wait_s=0.03, step_s=0.01, busy_s=0.04)
    assert tuner.active == 1
    _window(tuner, clock, 1, wait_s=0.03, step_s=0.01, busy_s=0.04)
    assert tuner.active == 5 and tuner.tasks_in_flight == 10
    # fed, the loop no longer waits: 5 workers stay (4 would not keep up)
    assert _run(tuner, clock, 4, wait_s=0.0, step_s=0.01, busy_s=0.04) == [5, 5, 5, 5]


def test_far_behind_it_scales_the_workers_by_the_pace_they_kept() -> None:
    """The model knows nothing yet (no busy time reported): 1 worker made the loop wait
    three steps per step, so 4 keep pace."""
    tuner = Tuner(AutotuneOptions(initial_workers=1, cpu_budget=16), 8, 2, True)
    _window(tuner, StepClock(), 5, wait_s=0.03, step_s=0.01, busy_s=0.0)
    assert tuner.active == 4


def test_a_change_is_judged_on_batches_dispatched_after_it() -> None:
    tuner = Tuner(AutotuneOptions(initial_workers=2, cpu_budget=16), 8, 2, True)
    clock = StepClock()
    _window(tuner, clock, 3, wait_s=0.002, step_s=0.01, busy_s=0.02)  # 2 need 3: +1
    assert tuner.active == 3
    # the 4 tasks in flight at the change arrive at the old pace: not a reason to add more
    _window(tuner, clock, 4, wait_s=0.002, step_s=0.01, busy_s=0.02)
    assert tuner.active == 3


def test_no_wait_retires_to_the_need_after_two_quiet_windows_down_to_min() -> None:
    tuner = Tuner(AutotuneOptions(initial_workers=4, min_workers=2), 4, 2, True)
    clock = StepClock()
    actives = _run(tuner, clock, 8, wait_s=0.0, step_s=0.05, busy_s=0.001)
    # quiet quarter windows until a full window was quiet, then two quiet windows: retire
    # to the need (1), within min_workers
    assert actives == [4, 4, 4, 2, 2, 2, 2, 2]


def test_bursty_answers_neither_overshoot_the_ramp_nor_stall_the_retirement() -> None:
    """The I/O case on 16 cores: 164 ms of sleep per batch, a 5 ms step: 164 * 1.2 / 5 ->
    40 workers (32 just keep up). 16 workers started together answer in bursts, so a
    window's wait (two thirds) says 48; windows between bursts have no answer at all."""
    tuner = Tuner(AutotuneOptions(initial_workers=16, cpu_budget=16), 64, 2, True)
    clock = StepClock()
    _window(tuner, clock, 3, wait_s=0.01, step_s=0.005, busy_s=0.164, cpu=0.01)
    assert tuner.active == 40  # the need, not the pace of a burst (48)
    actives = _run(tuner, clock, 8, wait_s=0.0, step_s=0.005, busy_s=0.164, answers=False)
    assert actives == [40] * 8  # no answer is no measure: 40 stay
    # started at more than that, quiet: down to the need in one move, not one by one
    tuner = Tuner(AutotuneOptions(initial_workers=60, cpu_budget=16), 64, 2, True)
    _window(tuner, clock := StepClock(), 3, wait_s=0.0, step_s=0.005, busy_s=0.164)
    actives = _run(tuner, clock, 6, wait_s=0.0, step_s=0.005, busy_s=0.164, answers=False)
    assert actives[-1] == 40 and set(actives) == {60, 40}


def test_a_count_at_which_the_loop_waited_is_not_retired_to_until_the_step_changes() -> None:
    tuner = Tuner(AutotuneOptions(initial_workers=4, cpu_budget=16), 8, 2, True)
    clock = StepClock()
    _window(tuner, clock, 5, wait_s=0.001, step_s=0.01, busy_s=0.04)  # 4 wait: 5 needed
    assert tuner.active == 5
    # quiet now, and the model says 4 suffice: 4 was seen short, so 5 stay
    assert _run(tuner, clock, 6, wait_s=0.0, step_s=0.01, busy_s=0.028) == [5] * 6
    # the step doubles: 3 suffice (with twice the headroom), retired to in one move
    actives = _run(tuner, clock, 16, wait_s=0.0, step_s=0.02, busy_s=0.04)
    assert actives[-1] == 3 and sorted(actives, reverse=True) == actives


def test_far_behind_with_enough_workers_by_the_busy_time_deepens_not_widens() -> None:
    """Bursts: the loop waited 9 % though the model says 5 workers suffice."""
    tuner = Tuner(AutotuneOptions(initial_workers=5, cpu_budget=16), 8, 2, True)
    _window(tuner, StepClock(), 5, wait_s=0.001, step_s=0.01, busy_s=0.04)
    assert (tuner.active, tuner.per_worker) == (5, 3)


def test_waits_with_batches_ready_are_the_main_process_s_and_change_nothing() -> None:
    tuner = Tuner(AutotuneOptions(initial_workers=1), 4, 2, True)
    _run(tuner, StepClock(), 4, wait_s=0.01, step_s=0.01, busy_s=0.04, ready=True)
    assert (tuner.active, tuner.per_worker) == (1, 2)


def test_waiting_with_enough_workers_deepens_prefetch_then_stops_at_the_cap() -> None:
    tuner = Tuner(AutotuneOptions(initial_workers=2, max_prefetch_factor=4), 2, 2, True)
    clock = StepClock()
    _run(tuner, clock, 6, wait_s=0.01, step_s=0.01, busy_s=0.001)
    assert (tuner.active, tuner.per_worker) == (2, 4)


def test_memory_budget_caps_the_depth() -> None:
    options = AutotuneOptions(initial_workers=2, memory_budget_bytes=3000)
    tuner = Tuner(options, 2, 4, True)
    clock = StepClock()
    clock.bytes_moved = 1000 * 16  # 1000 bytes a batch once 16 batches are in
    _run(tuner, clock, 2, wait_s=0.0, step_s=0.01, busy_s=0.001)
    assert tuner.tasks_in_flight * 1000 <= 3000 and tuner.per_worker == 1


def test_cpu_budget_caps_cpu_bound_workers_not_waiting_ones() -> None:
    cpu_bound = Tuner(AutotuneOptions(initial_workers=1, cpu_budget=2), 8, 2, True)
    _run(cpu_bound, StepClock(), 3, wait_s=0.05, step_s=0.01, busy_s=0.05, cpu=1.0)
    assert cpu_bound.active == 2
    waiting = Tuner(AutotuneOptions(initial_workers=1, cpu_budget=2), 8, 2, True)
    _window(waiting, StepClock(), 5, wait_s=0.05, step_s=0.01, busy_s=0.055, cpu=0.1)
    assert waiting.active == 7  # ceil(0.055 * 1.2 / 0.01): I/O-bound workers cost little CPU


def test_workers_waiting_on_remote_reads_get_more_read_ahead_up_to_the_cap() -> None:
    tuner = Tuner(AutotuneOptions(initial_workers=1, max_read_ahead=16), 1, 2, True)
    clock = StepClock()
    _run(tuner, clock, 8, wait_s=0.05, step_s=0.01, busy_s=0.05, cpu=0.1, requests=3)
    assert tuner.read_ahead == 16  # 8 (the readers' own widest), then doubled, capped
    # the same waits without remote requests (local files), or on a CPU: no read-ahead
    local = Tuner(AutotuneOptions(initial_workers=1), 1, 2, True)
    _run(local, StepClock(), 8, wait_s=0.05, step_s=0.01, busy_s=0.05, cpu=0.1)
    busy = Tuner(AutotuneOptions(initial_workers=1), 1, 2, True)
    _run(busy, StepClock(), 8, wait_s=0.05, step_s=0.01, busy_s=0.05, cpu=1.0, requests=3)
    off = Tuner(AutotuneOptions(initial_workers=1, max_read_ahead=0), 1, 2, True)
    _run(off, StepClock(), 8, wait_s=0.05, step_s=0.01, busy_s=0.05, cpu=0.1, requests=3)
    assert local.read_ahead == busy.read_ahead == off.read_ahead == 0


def test_a_decision_says_the_read_ahead_and_logs_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tuner = Tuner(AutotuneOptions(initial_workers=2), 2, 2, workers_tunable=False)
    clock = StepClock()
    with caplog.at_level(logging.INFO, logger="conveyor.autotune"):
        _window(tuner, clock, 5, wait_s=0.05, step_s=0.01, busy_s=0.05, cpu=0.1, requests=2)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "read-ahead 8 blocks" in line and "workers wait on remote reads" in line
    assert tuner.read_ahead == 8 and tuner.per_worker == 3


def test_the_default_start_is_the_cpus_within_the_ceiling() -> None:
    cpus = available_cpus()
    assert Tuner(AutotuneOptions(), cpus + 4, 2, True).active == cpus
    assert Tuner(AutotuneOptions(), 1, 2, True).active == 1


def test_streams_keep_their_workers_and_tune_depth_only() -> None:
    tuner = Tuner(AutotuneOptions(initial_workers=1), 3, 2, workers_tunable=False)
    assert tuner.active == 3
    _run(tuner, StepClock(), 4, wait_s=0.03, step_s=0.01, busy_s=0.04)
    assert tuner.active == 3 and tuner.per_worker > 2


def test_options_are_checked() -> None:
    assert autotune_options(False) is None and autotune_options(True) == AutotuneOptions()
    with pytest.raises(ValueError, match="min_workers"):
        AutotuneOptions(min_workers=0)
    with pytest.raises(ValueError, match="cpu_budget"):
        AutotuneOptions(cpu_budget=0)
    with pytest.raises(ValueError, match="target_wait_share"):
        AutotuneOptions(target_wait_share=1.5)
    with pytest.raises(ValueError, match="autotune should be a bool"):
        autotune_options("yes")  # type: ignore[arg-type]


def test_round_robin_deals_only_to_open_workers() -> None:
    dealer = RoundRobin(4)
    dealer.open = 2
    assert [dealer.next() for _ in range(4)] == [0, 1, 0, 1]
    dealer.open = 3
    assert [dealer.next() for _ in range(3)] == [2, 0, 1]
    assert dealer.taking == 3


def test_one_long_wait_among_ready_batches_is_the_workers_not_the_main_process_s() -> None:
    """A stream's shard boundary: 7 batches of 8 were there when asked (no wait), the 8th
    made the loop wait 60 ms. Most batches were ready, but the wait was not for them."""
    tuner = Tuner(AutotuneOptions(initial_workers=2), 2, 2, workers_tunable=False)
    clock = StepClock()
    for _ in range(4):
        _window(tuner, clock, 7, wait_s=0.0, step_s=0.01, busy_s=0.001, ready=True)
        _window(tuner, clock, 1, wait_s=0.06, step_s=0.01, busy_s=0.05)
    assert tuner.per_worker > 2


def test_a_wait_on_itself_retires_the_workers_the_step_does_not_need() -> None:
    """The IPC-bound case on 16 cores: 1 MB samples, the loop waits 5-8 % receiving
    batches that were already there, whatever the workers (16 took 1.6x the CPU of 1 for
    the same wait). Workers cannot shorten that wait: those the step does not need retire."""
    tuner = Tuner(AutotuneOptions(initial_workers=8), 8, 2, True)
    clock = StepClock()
    # the start: the first batches are not there yet, the workers are quick (1 ms a
    # batch against a 4 ms step): enough of them, so a deeper prefetch, not more workers
    _window(tuner, clock, 3, wait_s=0.01, step_s=0.004, busy_s=0.001)
    assert (tuner.active, tuner.per_worker) == (8, 3)
    actives = _run(tuner, clock, 6, wait_s=0.0003, step_s=0.004, busy_s=0.001, ready=True)
    assert actives[-1] == 1 and set(actives) == {8, 1}


def test_a_wait_mostly_for_batches_not_there_still_adds_workers() -> None:
    """Batches already there made most of the wait (60 %), but the wait for those not
    there is above the target on its own (13 % of the time): the workers are short too."""
    tuner = Tuner(AutotuneOptions(initial_workers=1, cpu_budget=16), 8, 2, True)
    clock = StepClock()
    for _ in range(3):
        _window(tuner, clock, 1, wait_s=0.006, step_s=0.01, busy_s=0.02, ready=True)
        _window(tuner, clock, 1, wait_s=0.004, step_s=0.01, busy_s=0.02)
    assert tuner.active >= 3


def test_a_deeper_prefetch_does_not_mark_the_count_as_too_few() -> None:
    """The start's wait with enough workers by their busy time deepened the prefetch: the
    count was not short, so the workers the step does not need may retire later."""
    tuner = Tuner(AutotuneOptions(initial_workers=6, cpu_budget=16), 8, 2, True)
    clock = StepClock()
    _window(tuner, clock, 3, wait_s=0.01, step_s=0.01, busy_s=0.01)
    assert (tuner.active, tuner.per_worker) == (6, 3)
    actives = _run(tuner, clock, 6, wait_s=0.0, step_s=0.01, busy_s=0.01)
    assert actives[-1] == 2
