"""Operations that split one stream into several outputs: ``fork`` and ``demux``.

A `Forker` or `Demultiplexer` is the shared point; its ``outputs`` are `Branch` pipes that
read from it. One pass over the input (a *generation*) serves every branch: a branch that
starts again while it already belongs to the current generation starts a new one, as in
torch (with torch's warning if other branches were not done). The shared state is guarded
by a lock, so branches may be pulled from different threads (e.g. one behind ``prefetch``).
"""

from __future__ import annotations

import copy as copy_module
import warnings
from collections import deque
from collections.abc import Callable, Sized
from typing import Any, Literal, TypeVar

from conveyor.datapipes.base import (
    Cursor,
    DataPipe,
    IterDataPipe,
    SourceCursor,
    StateDict,
    as_iter_pipe,
    check_version,
    sub_state,
)
from conveyor.datapipes.functional import register_op
from conveyor.datapipes.graph import iter_pipes
from conveyor.datapipes.utils.common import _check_unpickable_fn
from conveyor.engine.offload.channel import new_lock

__all__ = ["Branch", "Demultiplexer", "Forker", "detach_branches"]

T = TypeVar("T")


class _Splitter(IterDataPipe[Any]):
    """The shared point of a fork or demux; iterate its ``outputs``, not the splitter."""

    _absent: frozenset[int] = frozenset()  # outputs read in another process (ProcessRunner)

    def __init__(self, datapipe: IterDataPipe[Any], num_instances: int, buffer_size: int) -> None:
        if num_instances < 1:
            raise ValueError(
                f"Expected `num_instances` larger than 0, but {num_instances} is found"
            )
        self.datapipe = as_iter_pipe(datapipe, type(self).__name__)
        self.num_instances = num_instances
        self.buffer_size = buffer_size
        if buffer_size < 0:
            warnings.warn(
                f"Unlimited buffer size is set for `{type(self).__name__}`, "
                "please be aware of OOM at random places",
                UserWarning,
                stacklevel=3,
            )
        self._lock = new_lock()
        self.outputs: list[IterDataPipe[Any]] = [Branch(self, i) for i in range(num_instances)]

    def datapipe_inputs(self) -> list[DataPipe]:
        return [self.datapipe]

    @property
    def main_datapipe(self) -> IterDataPipe[Any]:
        """The input (torch's name for it)."""
        return self.datapipe

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._lock = new_lock()

    def _join(self, instance_id: int, state: StateDict | None) -> _SplitRun:
        with self._lock:
            run = self._cursor
            if run is None or run.joined[instance_id]:  # type: ignore[attr-defined]
                if run is not None and not run.finished():  # type: ignore[attr-defined]
                    warnings.warn(
                        "Some child DataPipes are not exhausted when __iter__ is called. We are "
                        "resetting the buffer and each child DataPipe will read from the start "
                        "again.",
                        UserWarning,
                        stacklevel=2,
                    )
                self._restart(state)
                run = self._active_cursor()
            assert isinstance(run, _SplitRun)
            run.joined[instance_id] = True
            return run

    def _take(self, instance_id: int, run: _SplitRun) -> Any:
        with self._lock:
            if self._cursor is not run:
                raise RuntimeError(
                    f"This output of {type(self).__name__} was invalidated: another output "
                    "started a new pass. Restart it with iter()."
                )
            return run.take(instance_id)

    def _state_of(self, run: _SplitRun) -> StateDict:
        with self._lock:
            return run.state()

    def _leave(self, instance_id: int, run: _SplitRun) -> None:
        with self._lock:
            if self._cursor is not run:
                return
            run.stop(instance_id)
            if all(run.stopped):
                self._drop_cursor()

    def _length(self, instance_id: int) -> int:
        raise TypeError(f"{type(self).__name__} outputs don't have valid length")

    def _set_absent(self, instance_ids: frozenset[int]) -> None:
        """Outputs that this process never reads (another process reads its own copy)."""
        with self._lock:
            self._absent = instance_ids
            run = self._cursor
            if isinstance(run, _SplitRun):
                for instance_id in instance_ids:
                    run.stop(instance_id)


class _SplitRun(SourceCursor[Any]):
    """One generation of a splitter: what each branch has read, and buffered items."""

    def __init__(self, node: _Splitter, state: StateDict | None) -> None:
        super().__init__(node.datapipe, state, type(node).__name__)
        self.joined = [False] * node.num_instances
        self.stopped: list[bool] = list(state["stopped"]) if state else [False] * len(self.joined)
        for instance_id in node._absent:
            self.stopped[instance_id] = True

    def next(self) -> Any:
        raise TypeError("iterate the outputs of a fork/demux, not the splitter itself")

    def take(self, instance_id: int) -> Any:
        raise NotImplementedError

    def stop(self, instance_id: int) -> None:
        self.stopped[instance_id] = True

    def finished(self) -> bool:
        raise NotImplementedError


class Forker(_Splitter):
    """Copies one stream to ``num_instances`` outputs (functional name: ``fork``).

    Same as torch's Forker, except that the class is the shared point and the outputs are
    its ``outputs`` (torch's constructor returns the list; ``dp.fork(n)`` returns it here
    too, also for ``n == 1``). ``buffer_size`` bounds how far the fastest output may run
    ahead of the slowest (`BufferError` beyond; ``-1``: unbounded); ``copy`` is None,
    ``"shallow"`` or ``"deep"``. Unlike torch, an output that stops early no longer holds
    items in the buffer.
    """

    def __init__(
        self,
        datapipe: IterDataPipe[Any],
        num_instances: int,
        buffer_size: int = 1000,
        copy: Literal["shallow", "deep"] | None = None,
    ) -> None:
        if copy not in (None, "shallow", "deep"):
            raise ValueError(
                f"Unknown copy method `{copy}` requested, choose one of None, `shallow` or `deep`."
            )
        self.copy = copy
        super().__init__(datapipe, num_instances, buffer_size)

    def _copy(self, value: Any) -> Any:
        if self.copy == "shallow":
            return copy_module.copy(value)
        if self.copy == "deep":
            return copy_module.deepcopy(value)
        return value

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return _ForkRun(self, state)

    def _length(self, instance_id: int) -> int:
        if isinstance(self.datapipe, Sized):
            return len(self.datapipe)
        raise TypeError(f"{type(self).__name__} outputs don't have valid length")


class _ForkRun(_SplitRun):
    def __init__(self, node: Forker, state: StateDict | None) -> None:
        super().__init__(node, state)
        self._node = node
        self._buffer: deque[Any] = deque(state["buffer"] if state else ())
        self._base = int(state["base"]) if state else 0  # stream index of _buffer[0]
        self._pointers: list[int] = list(state["pointers"]) if state else [0] * len(self.joined)
        self._end: int | None = state["end"] if state else None

    def take(self, instance_id: int) -> Any:
        if self.stopped[instance_id]:
            raise StopIteration
        index = self._pointers[instance_id]
        if index < self._base + len(self._buffer):
            value = self._buffer[index - self._base]
        else:
            if self._end is not None:
                raise StopIteration
            try:
                value = self.source.nonblocking_next()
            except StopIteration:
                self._end = index
                raise
            self._buffer.append(value)
            limit = self._node.buffer_size
            if 0 <= limit < len(self._buffer):
                raise BufferError(f"Forker buffer overflow, buffer size {limit} is insufficient.")
        self._pointers[instance_id] = index + 1
        self._trim()
        return self._node._copy(value)

    def _trim(self) -> None:
        live = [p for p, stopped in zip(self._pointers, self.stopped, strict=True) if not stopped]
        low = min(live) if live else self._base + len(self._buffer)
        while self._buffer and self._base < low:
            self._buffer.popleft()
            self._base += 1

    def stop(self, instance_id: int) -> None:
        super().stop(instance_id)
        self._trim()

    def finished(self) -> bool:
        return self._end is not None and all(self.stopped)

    def extra_state(self) -> StateDict:
        return {
            "buffer": list(self._buffer),
            "base": self._base,
            "pointers": list(self._pointers),
            "end": self._end,
            "stopped": list(self.stopped),
        }


class Demultiplexer(_Splitter):
    """Sends each item to the output ``classifier_fn`` names (functional name: ``demux``).

    Same as torch's Demultiplexer: ``classifier_fn`` returns an int in
    ``[0, num_instances)`` or None (dropped with ``drop_none``, else `ValueError`);
    ``buffer_size`` bounds the items waiting for their output (`BufferError` beyond,
    ``-1``: unbounded). Unlike torch, items for an output that stopped early are dropped.
    """

    def __init__(
        self,
        datapipe: IterDataPipe[Any],
        num_instances: int,
        classifier_fn: Callable[[Any], int | None],
        drop_none: bool = False,
        buffer_size: int = 1000,
    ) -> None:
        _check_unpickable_fn(classifier_fn)
        self.classifier_fn = classifier_fn
        self.drop_none = drop_none
        super().__init__(datapipe, num_instances, buffer_size)

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return _DemuxRun(self, state)


def detach_branches(subgraph: IterDataPipe[Any], inside: bool) -> None:
    """Mark fork/demux outputs as absent for a sub-graph that runs in another process.

    A splitter with outputs both inside and outside ``subgraph`` is copied into the child
    process, and each copy reads the input on its own. In the parent (``inside=True``) the
    outputs inside are marked absent; in the child (``inside=False``) those outside are,
    so neither copy buffers items for outputs that it will never serve.
    """
    present: dict[int, set[int]] = {}
    splitters: dict[int, _Splitter] = {}
    for node in iter_pipes(subgraph):
        if isinstance(node, Branch):
            splitters[id(node.splitter)] = node.splitter
            present.setdefault(id(node.splitter), set()).add(node.instance_id)
    for key, splitter in splitters.items():
        inside_ids = present[key]
        if len(inside_ids) == splitter.num_instances:
            continue  # the whole splitter lives in the sub-graph
        everything = frozenset(range(splitter.num_instances))
        chosen = frozenset(inside_ids) if inside else everything - inside_ids
        splitter._set_absent(chosen)


class _DemuxRun(_SplitRun):
    def __init__(self, node: Demultiplexer, state: StateDict | None) -> None:
        super().__init__(node, state)
        self._node = node
        saved = state["buffers"] if state else [()] * len(self.joined)
        self._buffers: list[deque[Any]] = [deque(items) for items in saved]
        self._usage = sum(len(b) for b in self._buffers)
        self._exhausted = bool(state["exhausted"]) if state else False

    def take(self, instance_id: int) -> Any:
        if self.stopped[instance_id]:
            raise StopIteration
        if self._buffers[instance_id]:
            self._usage -= 1
            return self._buffers[instance_id].popleft()
        if self._exhausted:
            raise StopIteration
        node = self._node
        while True:
            try:
                value = self.source.nonblocking_next()
            except StopIteration:
                self._exhausted = True
                raise
            target = node.classifier_fn(value)
            if target is None and node.drop_none:
                continue
            if target is None or target >= node.num_instances or target < 0:
                raise ValueError(
                    "Output of the classification fn should be between 0 and "
                    f"{node.num_instances - 1}. {target} is returned."
                )
            if target == instance_id:
                return value
            if self.stopped[target]:
                continue  # nobody reads that output again in this pass
            self._buffers[target].append(value)
            self._usage += 1
            if 0 <= node.buffer_size < self._usage:
                raise BufferError(
                    f"Demultiplexer buffer overflow, buffer size {node.buffer_size} is "
                    "insufficient."
                )

    def stop(self, instance_id: int) -> None:
        super().stop(instance_id)
        self._usage -= len(self._buffers[instance_id])
        self._buffers[instance_id].clear()

    def finished(self) -> bool:
        return self._exhausted and all(self.stopped)

    def extra_state(self) -> StateDict:
        return {
            "buffers": [list(b) for b in self._buffers],
            "exhausted": self._exhausted,
            "stopped": list(self.stopped),
        }


class Branch(IterDataPipe[T]):
    """One output of a `Forker` or `Demultiplexer` (torch's ``_ChildDataPipe``)."""

    def __init__(self, splitter: _Splitter, instance_id: int) -> None:
        self.splitter = splitter
        self.instance_id = instance_id

    @property
    def main_datapipe(self) -> _Splitter:
        """The shared splitter (torch's name for it)."""
        return self.splitter

    def _make_cursor(self, state: StateDict | None) -> Cursor[T]:
        return _BranchCursor(self, state)

    def __len__(self) -> int:
        return self.splitter._length(self.instance_id)


class _BranchCursor(Cursor[T]):
    def __init__(self, node: Branch[T], state: StateDict | None) -> None:
        if state is not None:
            check_version(state, 1, "Branch")
        self._splitter = node.splitter
        self._id = node.instance_id
        self._run = self._splitter._join(self._id, sub_state(state, "container"))

    def next(self) -> T:
        value: T = self._splitter._take(self._id, self._run)
        return value

    def state(self) -> StateDict:
        return {"version": 1, "container": self._splitter._state_of(self._run)}

    def close(self) -> None:
        self._splitter._leave(self._id, self._run)


register_op("iter.fork", Forker)
register_op("iter.demux", Demultiplexer)
