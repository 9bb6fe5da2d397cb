"""Batches copied to a device ahead of use: a side stream, events and ``record_stream``.

`DevicePrefetcher` pulls batches from a loader's iterator and starts each one's
host-to-device copy ``depth`` batches before the consumer asks for it. With CUDA
(`CudaTransfer`) the copies run on a side stream, so the copy of batch N+1 overlaps the
step that computes on batch N:

- *start* (side stream): every tensor of the batch is copied with ``non_blocking=True`` and
  an event is recorded after the copies;
- *hand-over* (consumer's stream, when ``next()`` returns the batch): the consumer's current
  stream waits for that event (on the GPU; the CPU does not block) and every tensor the copy
  made is marked with ``record_stream(current)``, so the caching allocator does not give its
  memory to the side stream's next copy while the consumer's kernels may still read it;
- the host batch is kept until its hand-over: its memory (pinned, maybe a registered slab,
  whose release then waits for the consumer's stream) stays valid while the copy may read it.

The stream runtime is injected (`StreamRuntime`), so the order of those calls is tested on a
machine without CUDA; `HostTransfer` (``device="cpu"``) runs the same prefetching without
streams. A batch the loader raised for is delivered as that exception, in its place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import torch

from conveyor.transport.structure import is_namedtuple, rebuild_mapping, rebuild_sequence

__all__ = [
    "CudaRuntime",
    "CudaTransfer",
    "DevicePrefetcher",
    "EpochProgress",
    "HostTransfer",
    "InFlight",
    "StreamRuntime",
    "Transfer",
    "move_to",
    "transfer_for",
]

PAGEABLE_WARNING = (
    "conveyor.to_device: batches arrive in pageable (not pinned) host memory, so their "
    "copies to {device} cannot overlap compute. Pass pin_memory=True to the DataLoader."
)


def move_to(data: Any, device: torch.device, non_blocking: bool, made: list[torch.Tensor]) -> Any:
    """``data`` with every tensor on ``device``, containers rebuilt with their own types.

    Tensors, mappings, namedtuples, tuples, sequences and dataclass instances are walked;
    other objects with a ``to()`` method are moved by it (``to(device, non_blocking=...)``,
    or ``to(device)`` if it takes no ``non_blocking``); str, bytes and anything else are
    returned as they are (torch's pin_memory rules). Tensors the move created are appended
    to ``made``.
    """
    if isinstance(data, torch.Tensor):
        moved = data.to(device, non_blocking=non_blocking)
        if moved is not data:
            made.append(moved)
        return moved
    if isinstance(data, str | bytes | bytearray):
        return data
    if isinstance(data, Mapping):
        values = {key: move_to(value, device, non_blocking, made) for key, value in data.items()}
        return values if type(data) is dict else rebuild_mapping(data, values)
    if isinstance(data, tuple):
        items = [move_to(item, device, non_blocking, made) for item in data]
        return type(data)(*items) if is_namedtuple(data) else type(data)(items)
    if isinstance(data, Sequence):
        items = [move_to(item, device, non_blocking, made) for item in data]
        return items if type(data) is list else rebuild_sequence(data, items)
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        changes = {
            field.name: move_to(getattr(data, field.name), device, non_blocking, made)
            for field in dataclasses.fields(data)
            if field.init
        }
        return dataclasses.replace(data, **changes)
    if callable(getattr(data, "to", None)):
        moved = _call_to(data, device, non_blocking)
        made.extend(_tensors_in(moved))
        return moved
    return data


def _call_to(data: Any, device: torch.device, non_blocking: bool) -> Any:
    try:
        return data.to(device, non_blocking=non_blocking)
    except TypeError as error:
        if "non_blocking" not in str(error):
            raise
        return data.to(device)


def _tensors_in(data: Any, depth: int = 3) -> list[torch.Tensor]:
    """Tensors held by an object a ``to()`` method returned (its attributes, a few levels)."""
    if isinstance(data, torch.Tensor):
        return [data]
    if depth == 0:
        return []
    if isinstance(data, Mapping):
        values: Any = data.values()
    elif isinstance(data, list | tuple):
        values = data
    else:
        values = getattr(data, "__dict__", {}).values()
    return [tensor for value in values for tensor in _tensors_in(value, depth - 1)]


@dataclasses.dataclass
class InFlight:
    """One batch between the start of its copy and its hand-over."""

    batch: Any  # on the device (its copies may still run)
    host: Any  # the batch as the loader gave it: kept until the hand-over
    ready: Any = None  # the event recorded after the copies (None: nothing to wait for)
    made: list[torch.Tensor] = dataclasses.field(default_factory=list)


class Transfer(Protocol):
    """How batches get to one device."""

    device: torch.device

    def start(self, batch: Any) -> InFlight:
        """Begin moving ``batch``; returns at once where the device copies asynchronously."""

    def hand_over(self, flight: InFlight) -> Any:
        """The moved batch, safe to use on the consumer's current stream."""


class HostTransfer:
    """``device="cpu"``: tensors are moved synchronously; no streams, nothing to wait for."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def start(self, batch: Any) -> InFlight:
        made: list[torch.Tensor] = []
        return InFlight(move_to(batch, self.device, False, made), batch, None, made)

    def hand_over(self, flight: InFlight) -> Any:
        return flight.batch


class StreamRuntime(Protocol):
    """The stream operations `CudaTransfer` uses (``torch.cuda``'s; a fake in CPU tests)."""

    def new_stream(self, device: torch.device) -> Any: ...
    def current_stream(self, device: torch.device) -> Any: ...
    def using(self, stream: Any) -> contextlib.AbstractContextManager[Any]: ...
    def record_event(self, stream: Any) -> Any: ...
    def wait_event(self, stream: Any, event: Any) -> None: ...
    def wait_stream(self, stream: Any, other: Any) -> None: ...
    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None: ...


class CudaRuntime:
    """`StreamRuntime` over ``torch.cuda``."""

    def new_stream(self, device: torch.device) -> Any:
        return torch.cuda.Stream(device)  # type: ignore[no-untyped-call]

    def current_stream(self, device: torch.device) -> Any:
        return torch.cuda.current_stream(device)

    def using(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(stream)

    def record_event(self, stream: Any) -> Any:
        return stream.record_event()

    def wait_event(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def wait_stream(self, stream: Any, other: Any) -> None:
        stream.wait_stream(other)

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        tensor.record_stream(stream)


class CudaTransfer:
    """Copies on one side stream per transfer (made at the first batch, after the loader has
    started its workers), handed over with an event wait and ``record_stream``."""

    def __init__(
        self, device: torch.device, non_blocking: bool = True, runtime: StreamRuntime | None = None
    ) -> None:
        self.device = device
        self.non_blocking = non_blocking
        self._runtime: StreamRuntime = runtime or CudaRuntime()
        self._stream: Any = None
        self._checked_pinned = False

    def start(self, batch: Any) -> InFlight:
        runtime = self._runtime
        if self._stream is None:
            if self.device.type == "cuda" and self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            self._stream = runtime.new_stream(self.device)
        if _on_a_device(batch):  # made by kernels of the consumer's stream: copy after them
            runtime.wait_stream(self._stream, runtime.current_stream(self.device))
        if not self._checked_pinned:
            self._checked_pinned = True
            self._warn_if_pageable(batch)
        made: list[torch.Tensor] = []
        with runtime.using(self._stream):
            moved = move_to(batch, self.device, self.non_blocking, made)
            ready = runtime.record_event(self._stream)
        return InFlight(moved, batch, ready, made)

    def hand_over(self, flight: InFlight) -> Any:
        runtime = self._runtime
        current = runtime.current_stream(self.device)
        runtime.wait_event(current, flight.ready)
        for tensor in flight.made:
            runtime.record_stream(tensor, current)
        flight.host = None  # its copies are ordered before anything `current` runs from now
        return flight.batch

    def _warn_if_pageable(self, batch: Any) -> None:
        if not self.non_blocking or self.device.type != "cuda":
            return
        host = [t for t in _tensors_in(batch, depth=4) if t.device.type == "cpu"]
        if host and not any(t.is_pinned() for t in host):
            warnings.warn(PAGEABLE_WARNING.format(device=self.device), UserWarning, stacklevel=4)


def _on_a_device(batch: Any) -> bool:
    return any(t.device.type != "cpu" for t in _tensors_in(batch, depth=4))


_NO_CUDA = (
    "conveyor.to_device(..., device={device!r}): CUDA is not available here ({why}). Install "
    "a CUDA build of torch and make a GPU visible (nvidia-smi, CUDA_VISIBLE_DEVICES), or pass "
    "device='cpu' to run the same prefetching without a GPU."
)


def transfer_for(device: str | int | torch.device, non_blocking: bool = True) -> Transfer:
    """The transfer for ``device``: `CudaTransfer` for CUDA, `HostTransfer` for the CPU.

    Raises:
        RuntimeError: a CUDA device without CUDA (the message says what to do).
        ValueError: another device type.
    """
    resolved = torch.device(device)
    if resolved.type == "cpu":
        return HostTransfer(resolved)
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                f"torch {torch.__version__} was built without CUDA"
                if torch.version.cuda is None
                else "torch sees no GPU"
            )
            raise RuntimeError(_NO_CUDA.format(device=str(device), why=why))
        return CudaTransfer(resolved, non_blocking)
    raise ValueError(
        f"conveyor.to_device supports 'cuda' (with a side stream) and 'cpu' devices, got "
        f"{str(device)!r}"
    )


@dataclasses.dataclass
class EpochProgress:
    """What a `DevicePrefetcher` delivered; outlives it (a loop left with ``break``)."""

    delivered: int = 0
    state: Any = None  # the loader's state after the last batch delivered (or raised)
    finished: bool = False  # the loader's epoch ended and everything was delivered


@dataclasses.dataclass
class _Entry:
    flight: InFlight | None
    error: Exception | None
    state: Any


class DevicePrefetcher:
    """Iterates ``source``'s batches on ``transfer``'s device, ``depth`` copies ahead.

    Args:
        source: The loader's iterator (pulled from in the consumer's thread).
        transfer: How batches move (`transfer_for`).
        depth: Batches whose copies run while the consumer uses the current one (0: each
            batch is copied when asked for).
        snapshot: Called after each batch is pulled from ``source``: the loader's state
            then (``loader.state_dict``), which becomes ``progress.state`` once that batch
            is delivered. None: no states.
        progress: Where deliveries are counted (a fresh `EpochProgress` if None).

    An exception ``source`` raises is delivered in its batch's place (the batches before it
    come first); pulling then goes on, as the loader allows. Not thread-safe.
    """

    def __init__(
        self,
        source: Iterator[Any],
        transfer: Transfer,
        depth: int,
        snapshot: Callable[[], Any] | None = None,
        progress: EpochProgress | None = None,
    ) -> None:
        self._source = source
        self._transfer = transfer
        self._depth = depth
        self._snapshot = snapshot
        self._queue: deque[_Entry] = deque()
        self._exhausted = False
        self.progress = progress if progress is not None else EpochProgress()

    def __iter__(self) -> DevicePrefetcher:
        return self

    @property
    def in_flight(self) -> int:
        """Batches pulled from the loader and not delivered yet."""
        return len(self._queue)

    def __next__(self) -> Any:
        if not self._queue:
            self._pull()
        if not self._queue:
            self.progress.finished = True
            raise StopIteration
        entry = self._queue.popleft()
        while not self._exhausted and len(self._queue) < self._depth:
            self._pull()  # the next copies start before this batch is handed over
        self.progress.state = entry.state
        self.progress.delivered += 1
        if entry.error is not None:
            raise entry.error
        assert entry.flight is not None
        return self._transfer.hand_over(entry.flight)

    def _pull(self) -> None:
        try:
            batch = next(self._source)
        except StopIteration:
            self._exhausted = True
            return
        except Exception as error:
            self._queue.append(_Entry(None, error, self._state_now()))
            return
        state = self._state_now()
        try:
            flight = self._transfer.start(batch)
        except Exception as error:  # a custom to() that failed, a device out of memory
            self._queue.append(_Entry(None, error, state))
            return
        self._queue.append(_Entry(flight, None, state))

    def _state_now(self) -> Any:
        return self._snapshot() if self._snapshot is not None else None

    def close(self) -> None:
        """Drop the batches in flight (they were never delivered)."""
        self._queue.clear()
        self._exhausted = True
