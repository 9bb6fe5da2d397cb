"""Running part of a graph elsewhere: ``prefetch`` (a thread) and ``run_in_process``.

Both nodes hold no thread or process themselves: the first pull starts a
`conveyor.engine.offload.offload` owner that runs the input sub-graph behind a channel, and the
node's cursor only sends requests and reads responses, raising `NotAvailable` (with the
channel's doorbell) while nothing has arrived. Output is identical to running in line.

State: the producer attaches the sub-graph's state (as held, items as they are: the
outermost pipe's ``state_dict()`` makes it plain data) to every ``snapshot_every``-th
item; the cursor keeps the latest snapshot it has *consumed* and how many items it took
since, so a restored pipe restarts the sub-graph from that snapshot
(replaying at most ``snapshot_every - 1`` items); items that were prefetched but not
consumed are produced again, never lost.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sized
from typing import Any, Generic, TypeVar

from conveyor.datapipes.base import (
    Cursor,
    IterDataPipe,
    SourceCursor,
    StateDict,
    as_iter_pipe,
    check_version,
)
from conveyor.datapipes.cursor import FRESH_STATE
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.graph import iter_pipes
from conveyor.datapipes.iter.branching import detach_branches
from conveyor.engine.offload.channel import ChannelClosed
from conveyor.engine.offload.offload import NEXT, End, Item, ProcessOffload, ThreadOffload
from conveyor.transport.state_wire import PackedState, unpack_state

__all__ = ["Prefetcher", "ProcessRunner"]

T = TypeVar("T")


class _Offloader(IterDataPipe[T]):
    def __init__(self, datapipe: IterDataPipe[T], buffer_size: int, snapshot_every: int) -> None:
        if buffer_size < 1:
            raise ValueError(
                f"{type(self).__name__}: `buffer_size` must be >= 1, got {buffer_size}"
            )
        if snapshot_every < 1:
            raise ValueError(
                f"{type(self).__name__}: `snapshot_every` must be >= 1, got {snapshot_every}"
            )
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        self.buffer_size = buffer_size
        self.snapshot_every = snapshot_every

    def _start(self, state: StateDict | None, skip: int) -> ThreadOffload | ProcessOffload:
        raise NotImplementedError

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        return _OffloadCursor(self, state)

    def __len__(self) -> int:
        if isinstance(self.datapipe, Sized):
            return len(self.datapipe)
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")


class Prefetcher(_Offloader[T]):
    """Runs its input sub-graph in a background thread (functional name: ``prefetch``).

    Up to ``buffer_size`` items are produced ahead of the consumer. The thread starts at
    the first pull and stops (and is joined) when the pass ends, when the pipe is reset or
    closed, when its iterator is dropped, or when the pipe is garbage-collected.
    """

    def __init__(
        self, source_datapipe: IterDataPipe[T], buffer_size: int = 10, snapshot_every: int = 1
    ) -> None:
        super().__init__(source_datapipe, buffer_size, snapshot_every)

    def _start(self, state: StateDict | None, skip: int) -> ThreadOffload | ProcessOffload:
        return ThreadOffload(
            _SubGraph(self.datapipe),
            state=state,
            skip=skip,
            buffer_size=self.buffer_size,
            snapshot_every=self.snapshot_every,
        )


class ProcessRunner(_Offloader[T]):
    """Runs its input sub-graph in a child process (functional name: ``run_in_process``).

    Items (and the sub-graph's exceptions, re-raised here with their type) cross through a
    process channel; up to ``buffer_size`` items are produced ahead. The child starts at
    the first pull and is stopped (terminated if it does not answer within a few seconds)
    when the pass ends, on reset/close, when the iterator is dropped, or on garbage
    collection; if it dies, the next pull raises `RuntimeError` with its exit code.
    ``multiprocessing_context`` is a context or start-method name (None: the default);
    with "spawn"/"forkserver" the sub-graph must be picklable. The child is a daemon, so
    this node cannot run inside another daemonic process (e.g. a torch worker).
    """

    def __init__(
        self,
        source_datapipe: IterDataPipe[T],
        buffer_size: int = 10,
        multiprocessing_context: Any = None,
        snapshot_every: int = 1,
    ) -> None:
        super().__init__(source_datapipe, buffer_size, snapshot_every)
        self.multiprocessing_context = multiprocessing_context

    def is_separate_process(self) -> bool:
        return True

    def _start(self, state: StateDict | None, skip: int) -> ThreadOffload | ProcessOffload:
        detach_branches(self.datapipe, inside=True)
        return ProcessOffload(
            _SubGraph(_ProcessRoot(self.datapipe)),
            state=state,
            skip=skip,
            buffer_size=self.buffer_size,
            snapshot_every=self.snapshot_every,
            context=self.multiprocessing_context,
        )


class _SubGraph(Generic[T]):
    """The sub-graph as its producer serves it (`conveyor.engine.offload.offload.Servable`).

    Its state goes as the graph holds it, items as they are (a `DataChunk`, an object),
    and comes back the same way: a graph's state becomes plain data once, in the outermost
    pipe's ``state_dict()``, and is read back once, in its ``load_state_dict()``.
    """

    def __init__(self, graph: IterDataPipe[T]) -> None:
        self.graph = graph

    def __iter__(self) -> Iterator[T]:
        return iter(self.graph)

    def reset(self) -> None:
        self.graph.reset()

    def state_dict(self) -> StateDict:
        return self.graph._held_state()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.graph._restart(state)

    def close(self) -> None:
        self.graph.close()


class _ProcessRoot(IterDataPipe[T]):
    """What the child process runs: the sub-graph, first cut loose from the parent's runtime.

    With the "fork" start method the child inherits the parent's live cursors (threads that
    do not exist in the child, channels owned by the parent): they are forgotten, never
    closed, before the first pull. Fork/demux outputs read outside are marked absent.
    """

    def __init__(self, datapipe: IterDataPipe[T]) -> None:
        self.datapipe = datapipe

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        _forget_runtime(self.datapipe)
        detach_branches(self.datapipe, inside=False)
        return _PassCursor(self.datapipe, state, "ProcessRunner")


class _PassCursor(SourceCursor[T]):
    def next(self) -> T:
        value: T = self.source.nonblocking_next()
        return value


def _forget_runtime(root: IterDataPipe[Any]) -> None:
    for node in iter_pipes(root):
        if isinstance(node, IterDataPipe):
            node._forget()


class _OffloadCursor(Cursor[T]):
    def __init__(self, node: _Offloader[T], state: StateDict | None) -> None:
        if state is not None:
            check_version(state, 1, type(node).__name__)
        self._node = node
        # the sub-graph's latest state: as loaded, or packed by the producer (unpacked only
        # when this pipe is checkpointed, as a worker's is: engine/offload/offload.py)
        self._snapshot: StateDict | PackedState | None = state["source"] if state else None
        self._since = int(state["since"]) if state else 0
        self._done = bool(state["done"]) if state else False
        self._offload: ThreadOffload | ProcessOffload | None = None
        self._outstanding = 0

    def next(self) -> T:
        if self._done:
            raise StopIteration
        offload = self._offload
        if offload is None:
            offload = self._offload = self._node._start(self._plain_snapshot(), self._since)
        endpoint = offload.endpoint
        try:
            while self._outstanding < self._node.buffer_size:
                endpoint.put(NEXT, blocking=False)
                self._outstanding += 1
            message = endpoint.get(blocking=False)
        except ChannelClosed as exc:
            reason = _ending(offload)
            self._done = True
            self.close()
            raise RuntimeError(f"{type(self._node).__name__}: {reason}") from exc
        self._outstanding -= 1
        if isinstance(message, Item):
            if message.snapshot is not None:
                self._snapshot, self._since = message.snapshot, 0
            else:
                self._since += 1
            value: T = message.value
            return value
        self._done = True
        self.close()
        if isinstance(message, End):
            self._snapshot, self._since = message.snapshot, 0
            raise StopIteration
        message.reraise()
        raise AssertionError("unreachable: a Failure always raises")

    def _plain_snapshot(self) -> StateDict | None:
        snapshot = self._snapshot
        return unpack_state(snapshot) if isinstance(snapshot, PackedState) else snapshot

    def state(self) -> StateDict:
        snapshot = self._plain_snapshot()
        source = snapshot if snapshot is not None else dict(FRESH_STATE)
        return {"version": 1, "source": source, "since": self._since, "done": self._done}

    def close(self) -> None:
        offload, self._offload = self._offload, None
        self._outstanding = 0
        if offload is not None:
            offload.close()


def _ending(offload: ThreadOffload | ProcessOffload) -> str:
    if isinstance(offload, ProcessOffload):
        return f"the process running the pipe ended unexpectedly ({offload.describe_exit()})"
    return "the thread running the pipe ended unexpectedly"


register_op("iter.prefetch", Prefetcher)
register_op("iter.run_in_process", ProcessRunner)
