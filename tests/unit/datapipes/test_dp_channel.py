"""The RFC's two-ended queue: non-blocking, ordered, bounded, two ends, clean shutdown."""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.connection import Connection

import pytest

from conveyor.engine.offload.channel import (
    ChannelClosed,
    Doorbell,
    NotAvailable,
    connection_endpoint,
    process_channel,
    thread_channel,
)


def test_order_no_loss_no_duplicates_between_threads() -> None:
    a, b = thread_channel(4)
    n = 2000

    def produce() -> None:
        for i in range(n):
            a.put(i)
        a.close()

    worker = threading.Thread(target=produce)
    worker.start()
    received = []
    while True:
        try:
            received.append(b.get(timeout=5))
        except ChannelClosed:
            break
    worker.join(5)
    assert received == list(range(n))


def test_non_blocking_and_bounded() -> None:
    a, b = thread_channel(2)
    with pytest.raises(NotAvailable) as empty:
        b.get(blocking=False)
    assert empty.value.bell is b.bell
    a.put(1)
    a.put(2)
    with pytest.raises(NotAvailable):
        a.put(3, blocking=False)
    with pytest.raises(NotAvailable):
        a.put(3, timeout=0.01)
    assert b.get(blocking=False) == 1
    a.put(3, blocking=False)
    assert [b.get(), b.get()] == [2, 3]


def test_both_directions_request_response() -> None:
    consumer, producer = thread_channel(2)
    consumer.put("next")
    assert producer.get() == "next"
    producer.put(("item", 1))
    assert consumer.get() == ("item", 1)


def test_close_delivers_what_was_sent_then_raises() -> None:
    a, b = thread_channel(3)
    a.put("x")
    b.close()
    with pytest.raises(ChannelClosed):
        a.put("y")
    assert b.get() == "x"
    with pytest.raises(ChannelClosed):
        b.get()


def test_not_available_wait_wakes_on_put() -> None:
    a, b = thread_channel(1)
    try:
        b.get(blocking=False)
    except NotAvailable as pending:
        a.put("late")  # after the failed check: the doorbell must have moved
        assert pending.changed()
        pending.wait(timeout=5)
    assert b.get(blocking=False) == "late"


def test_doorbell_forwarding_and_timeout() -> None:
    source, target = Doorbell(), Doorbell()
    since = target.generation
    assert not target.wait(since, timeout=0.01)
    source.forward_to(target)
    source.forward_to(target)
    source.ring()
    assert target.wait(since, timeout=5)
    assert target.generation == since + 1


def test_endpoints_cannot_be_pickled_or_copied() -> None:
    import copy
    import pickle

    a, _ = thread_channel(1)
    with pytest.raises(TypeError, match="two ends"):
        pickle.dumps(a)
    with pytest.raises(TypeError, match="two ends"):
        copy.copy(a)


def _echo(conn: Connection) -> None:
    end = connection_endpoint(conn)
    try:
        while True:
            end.put(end.get() * 2)
    except ChannelClosed:
        pass
    finally:
        end.close()


def test_process_channel_round_trip_and_shutdown() -> None:
    ctx = multiprocessing.get_context("fork")
    end, child_conn = process_channel(ctx, 3)
    child = ctx.Process(target=_echo, args=(child_conn,))
    child.start()
    child_conn.close()
    for i in range(50):
        end.put(i)
        assert end.get(timeout=5) == 2 * i
    with pytest.raises(NotAvailable):
        end.get(blocking=False)
    end.close()
    child.join(5)
    assert child.exitcode == 0
    child.close()
    with pytest.raises(ChannelClosed):
        end.get()
