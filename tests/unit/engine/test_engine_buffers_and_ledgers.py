"""The engine's pure bookkeeping, without processes: result buffers, the in-flight ledger,
round-robin dealing, the delivery log and the bad-sample ledger."""

from __future__ import annotations

import pytest

from conveyor.engine.loop.in_flight import InFlight, RoundRobin
from conveyor.engine.loop.reorder import EMPTY, InOrderBuffer, ReadyFirstBuffer, make_buffer
from conveyor.engine.loop.skips import EXAMPLES_KEPT, SkipLog
from conveyor.formats.errors import BadSampleWarning
from conveyor.formats.skips import SkipRecord
from conveyor.state.loader_state import DeliveryLog


def test_in_order_buffer_holds_early_results_until_their_turn() -> None:
    buffer = make_buffer(in_order=True)
    assert isinstance(buffer, InOrderBuffer)
    for task_id in range(4):
        buffer.expect(task_id)
    buffer.put(2, "c")
    buffer.put(1, "b")
    assert buffer.pop() is EMPTY and buffer.head() == 0 and len(buffer) == 4
    buffer.put(0, "a")
    assert [buffer.pop(), buffer.pop(), buffer.pop()] == ["a", "b", "c"]
    assert buffer.pop() is EMPTY and len(buffer) == 1


def test_in_order_buffer_skips_forgotten_tasks() -> None:
    buffer = InOrderBuffer()
    for task_id in range(4):
        buffer.expect(task_id)
    buffer.forget([0, 2])
    assert buffer.head() == 1 and len(buffer) == 2
    buffer.put(3, "d")
    buffer.put(1, "b")
    assert [buffer.pop(), buffer.pop()] == ["b", "d"]
    assert buffer.pop() is EMPTY and len(buffer) == 0 and buffer.head() is None


def test_ready_first_buffer_hands_out_in_arrival_order() -> None:
    buffer = make_buffer(in_order=False)
    assert isinstance(buffer, ReadyFirstBuffer)
    for task_id in range(3):
        buffer.expect(task_id)
    assert buffer.pop() is EMPTY
    buffer.put(2, "c")
    buffer.put(0, "a")
    buffer.forget([1])
    assert len(buffer) == 2
    assert [buffer.pop(), buffer.pop()] == ["c", "a"]
    assert buffer.pop() is EMPTY and len(buffer) == 0


def test_in_flight_follows_a_task_from_dispatch_to_delivery() -> None:
    ledger = InFlight()
    ledger.dispatch(0, worker_id=0, position=0)
    ledger.dispatch(1, worker_id=1, position=1)
    ledger.dispatch(2, worker_id=0, position=2)
    assert ledger.awaited == 3
    ticket = ledger.answer(1)
    assert ticket is not None and (ticket.worker_id, ticket.position) == (1, 1)
    assert ledger.answer(1) is None  # answered once only
    assert ledger.answer(99) is None  # a late answer of another epoch
    assert ledger.awaited == 2 and ledger.holds(1) and ledger.worker_of(1) == 1
    delivered = ledger.deliver(1)
    assert delivered.position == 1 and not ledger.holds(1) and ledger.worker_of(1) is None


def test_in_flight_orphans_only_the_unanswered_tasks_of_an_ended_worker() -> None:
    ledger = InFlight()
    for task_id in range(4):
        ledger.dispatch(task_id, worker_id=task_id % 2, position=task_id)
    assert ledger.answer(0) is not None  # worker 0's first batch waits for delivery
    assert ledger.answer(2) is not None  # worker 0's stream ended here
    ledger.drop(2)
    assert ledger.orphan(0) == []
    assert ledger.orphan(1) == [1, 3] and ledger.awaited == 0
    assert ledger.holds(0) and not ledger.holds(1)


def test_a_task_sent_before_the_end_of_stream_stays_awaited_if_answered_later() -> None:
    """Ray can report worker 1's end of stream (task 3) before its last batch (task 1): that
    batch is still coming and must not be orphaned (it was lost, and the epoch ended short)."""
    ledger = InFlight()
    for task_id in range(6):
        ledger.dispatch(task_id, worker_id=task_id % 2, position=task_id)
    assert ledger.answer(3) is not None  # worker 1's end of stream, answered first
    ledger.drop(3)
    assert ledger.orphan(1, after=3) == [5]  # sent after the end: never answered
    assert ledger.holds(1) and ledger.answer(1) is not None  # the batch before it arrives
    assert ledger.deliver(1).position == 1


def test_round_robin_skips_retired_workers_and_can_peek() -> None:
    dealer = RoundRobin(3)
    assert [dealer.next() for _ in range(4)] == [0, 1, 2, 0]
    dealer.retire(2)
    assert dealer.next(advance=False) == 1
    assert [dealer.next() for _ in range(3)] == [1, 0, 1]
    resumed = RoundRobin(3, active=[False, True, True], start=0)
    assert resumed.next() == 1
    resumed.retire(1)
    resumed.retire(2)
    assert resumed.next() is None


def test_delivery_log_keeps_a_watermark_and_what_came_ahead() -> None:
    log = DeliveryLog(num_workers=2, watermark=3, ahead={5})
    log.delivered(0, 4, {"s": 0})
    assert (log.watermark, log.ahead) == (3, {4, 5})
    log.delivered(1, 3, None)
    assert (log.watermark, log.ahead) == (6, set())
    # counts: batches delivered since the worker's last state (a resume reads them again)
    assert log.counts == [0, 1] and log.states == [{"s": 0}, None]
    log.delivered(0, 6, None)
    log.delivered(0, 7, None)
    assert log.counts == [2, 1] and log.states == [{"s": 0}, None]
    log.delivered(0, 8, {"s": 3})
    assert log.counts == [0, 1] and log.states == [{"s": 3}, None]


def _bad(index: int, reason: str) -> SkipRecord:
    return SkipRecord("", reason, 1, (f"index {index!r}",))


def test_skip_log_counts_keeps_examples_and_reports_once() -> None:
    log = SkipLog(max_skipped=None)
    log.record(())
    log.record(tuple(_bad(i, f"ValueError: bad {i}") for i in range(EXAMPLES_KEPT + 2)))
    assert log.count == EXAMPLES_KEPT + 2 and len(log.examples) == EXAMPLES_KEPT
    with pytest.warns(BadSampleWarning, match=rf"skipped {EXAMPLES_KEPT + 2} samples.*index 0"):
        log.report()


def test_skip_log_counts_samples_lost_not_records() -> None:
    log = SkipLog(max_skipped=None)
    lost = log.record((SkipRecord("s3://b/shard-3.tar", "cut short", 7, ("k1", "k2"), True),))
    assert lost == 7 and log.count == 7
    with pytest.warns(BadSampleWarning, match=r"skipped ~7 samples.*shard-3\.tar.*'k1'"):
        log.report()


def test_skip_log_stops_past_the_limit() -> None:
    log = SkipLog(max_skipped=1)
    log.record((_bad(7, "KeyError: 7"),))
    with pytest.raises(RuntimeError, match=r"more than max_skipped=1.*index 7"):
        log.record((_bad(8, "KeyError: 8"),))


def test_in_flight_load_counts_a_workers_tasks_until_delivered_or_forgotten() -> None:
    ledger = InFlight()
    for task_id, worker_id in enumerate([0, 1, 0, 0]):
        ledger.dispatch(task_id, worker_id, task_id)
    assert (ledger.load(0), ledger.load(1)) == (3, 1)
    ledger.answer(0)
    assert ledger.load(0) == 3  # answered but held: still the worker's
    ledger.deliver(0)
    ledger.answer(3)
    ledger.drop(3)
    assert ledger.orphan(0) == [2]
    assert (ledger.load(0), ledger.load(1)) == (0, 1)


def test_next_with_room_skips_full_and_retired_workers_and_moves_the_cursor() -> None:
    dealer = RoundRobin(3)
    full = {0}
    assert dealer.next_with_room(lambda w: w not in full) == 1
    dealer.retire(2)
    assert dealer.next_with_room(lambda w: w not in full) == 1  # 2 retired, 0 full
    assert dealer.next_with_room(lambda w: False) is None
