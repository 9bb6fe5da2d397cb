"""Run a DataPipe sub-graph behind a channel, in a background thread or a child process.

The consumer and the producer speak the RFC's request/response protocol over a
`conveyor.engine.offload.channel` channel: the consumer sends one `NEXT` per item it wants (it keeps
at most ``buffer_size`` requests outstanding, which bounds everything in flight) and `STOP`
when it is done; the producer answers every `NEXT` with exactly one `Item`, `End` or
`Failure`. Every ``snapshot_every``-th `Item` (and the `End`) carries the sub-graph's
``state_dict()`` taken right after producing it, so the consumer can checkpoint what it has
*consumed* while the producer runs ahead: the worker pools' state policy
(`conveyor.engine.resume.progress.StateCadence`, the state packed for the trip by
`conveyor.transport.state_wire` and unpacked only when the consumer is checkpointed; the
items since the last state are counted and read again on resume).

`ThreadOffload` and `ProcessOffload` each own one thread or process: ``close()`` (also run
by the garbage collector and at interpreter exit) stops it and waits for it, so nothing is
left behind after an early ``break`` or when the owning pipe is dropped.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

from conveyor.engine.offload.channel import (
    ChannelClosed,
    Endpoint,
    connection_endpoint,
    process_channel,
    thread_channel,
)
from conveyor.engine.resume.progress import StateCadence
from conveyor.engine.workers.forking import garbage_kept_from_children
from conveyor.engine.workers.remote_error import RemoteError
from conveyor.engine.workers.shutdown import describe_exit, stop_processes
from conveyor.transport.state_wire import PackedState, pack_state

__all__ = [
    "NEXT",
    "STOP",
    "End",
    "Failure",
    "Item",
    "ProcessOffload",
    "Servable",
    "ThreadOffload",
]

NEXT = "next"
STOP = "stop"


class Servable(Protocol):
    """What a producer needs from a sub-graph (an `IterDataPipe` satisfies it)."""

    def __iter__(self) -> Iterator[Any]: ...

    def reset(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Item:
    """One produced item, with the sub-graph's state right after it (or None)."""

    value: Any
    snapshot: PackedState | None


@dataclass(frozen=True)
class End:
    """The sub-graph is exhausted; ``snapshot`` is its final state."""

    snapshot: PackedState


@dataclass(frozen=True)
class Failure:
    """The sub-graph raised: ``error`` (thread) or ``remote`` (process, re-raised by type)."""

    error: BaseException | None
    remote: RemoteError | None

    def reraise(self) -> None:
        """Raise the producer's exception in the consumer."""
        if self.remote is not None:
            self.remote.reraise()
        if self.error is not None:
            raise self.error


@dataclass(frozen=True)
class _Start:
    state: Mapping[str, Any] | None
    skip: int
    snapshot_every: int


class _Producer:
    """Answers requests from one sub-graph iterator, started lazily on the first request."""

    def __init__(self, graph: Servable, start: _Start, portable: bool) -> None:
        self._graph = graph
        self._start = start
        self._portable = portable
        self._it: Iterator[Any] | None = None
        self._cadence = StateCadence(True, start.snapshot_every)
        self._final: End | None = None

    def answer(self) -> Item | End | Failure:
        if self._final is not None:
            return self._final
        try:
            it = self._iterator()
            value = next(it)
        except StopIteration:
            self._final = End(pack_state(self._graph.state_dict()))
            return self._final
        except Exception as exc:
            where = "in a DataPipe process"
            return Failure(None, RemoteError(where)) if self._portable else Failure(exc, None)
        snapshot = pack_state(self._graph.state_dict()) if self._cadence.now() else None
        return Item(value, snapshot)

    def _iterator(self) -> Iterator[Any]:
        if self._it is None:
            if self._start.state is None:
                self._graph.reset()
            else:
                self._graph.load_state_dict(self._start.state)
            self._it = iter(self._graph)
            for _ in range(self._start.skip):
                next(self._it)
        return self._it


def serve(graph: Servable, end: Endpoint, start: _Start, portable: bool) -> None:
    """Answer requests arriving on ``end`` until `STOP` or the channel closes."""
    producer = _Producer(graph, start, portable)
    try:
        while end.get() != STOP:
            end.put(producer.answer())
    except (ChannelClosed, KeyboardInterrupt):
        pass
    finally:
        graph.close()
        end.close()


class ThreadOffload:
    """Runs ``graph`` in a daemon thread; the caller talks to it through `endpoint`.

    The thread holds no reference to this object, so dropping it (or its owner) closes the
    channel and the thread ends after its current item.
    """

    def __init__(
        self,
        graph: Servable,
        *,
        state: Mapping[str, Any] | None,
        skip: int,
        buffer_size: int,
        snapshot_every: int = 1,
        join_timeout_s: float = 5.0,
    ) -> None:
        self.endpoint, producer_end = thread_channel(buffer_size + 1)
        self._thread = threading.Thread(
            target=serve,
            args=(graph, producer_end, _Start(state, skip, snapshot_every), False),
            name="conveyor-prefetch",
            daemon=True,
        )
        self._thread.start()
        self._finalizer = weakref.finalize(
            self, _close_thread, self.endpoint, self._thread, join_timeout_s, os.getpid()
        )

    def close(self) -> None:
        """Stop the thread and wait for it (idempotent)."""
        self._finalizer()

    def __enter__(self) -> ThreadOffload:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _close_thread(
    end: Endpoint, thread: threading.Thread, join_timeout_s: float, owner_pid: int
) -> None:
    if os.getpid() != owner_pid:
        return  # a forked copy: the thread and channel belong to the parent
    end.close()
    if thread is not threading.current_thread():
        thread.join(join_timeout_s)


def _process_main(
    graph: Servable, conn: Connection, start: _Start, inherited: Connection | None
) -> None:
    # A forked child holds a copy of the parent's end of the pipe: close it, so that the
    # parent's death reads as end-of-file here. Ctrl-C is the parent's to handle.
    if inherited is not None:
        inherited.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(graph, connection_endpoint(conn), start, portable=True)


class ProcessOffload:
    """Runs ``graph`` in a daemon child process; the caller talks to it through `endpoint`.

    ``context`` is a `multiprocessing` context or start-method name (None: the default).
    With "spawn" or "forkserver" the graph is pickled, so its functions must be picklable.
    ``close()`` asks the child to stop, then terminates it after ``join_timeout_s``.
    """

    def __init__(
        self,
        graph: Servable,
        *,
        state: Mapping[str, Any] | None,
        skip: int,
        buffer_size: int,
        snapshot_every: int = 1,
        context: Any = None,
        join_timeout_s: float = 5.0,
    ) -> None:
        ctx: Any = context
        if context is None or isinstance(context, str):
            ctx = multiprocessing.get_context(context)
        self.endpoint, child_conn = process_channel(ctx, buffer_size + 1)
        inherited = self.endpoint.connection if ctx.get_start_method() == "fork" else None
        try:
            self._process = ctx.Process(
                target=_process_main,
                args=(graph, child_conn, _Start(state, skip, snapshot_every), inherited),
                name="conveyor-datapipe-process",
                daemon=True,
            )
            with garbage_kept_from_children():
                self._process.start()
        except BaseException:
            self.endpoint.close()
            raise
        finally:
            child_conn.close()
        self._finalizer = weakref.finalize(
            self, _close_process, self.endpoint, self._process, join_timeout_s, os.getpid()
        )

    def describe_exit(self, wait_s: float = 1.0) -> str:
        """How the child ended ("exited with code 1", ...), waiting up to ``wait_s``."""
        if not self._finalizer.alive:
            return "already closed"
        self._process.join(wait_s)
        code = self._process.exitcode
        return "still running" if code is None else describe_exit(code)

    def close(self) -> None:
        """Stop the child and wait for it (idempotent)."""
        self._finalizer()

    def __enter__(self) -> ProcessOffload:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _close_process(end: Endpoint, process: Any, join_timeout_s: float, owner_pid: int) -> None:
    if os.getpid() != owner_pid:
        return  # a forked copy: only the process that started the child may stop it
    with contextlib.suppress(ChannelClosed):
        end.put(STOP)
    stop_processes([process], join_timeout_s)
    end.close()
    process.close()
