"""engine.device_prefetch without a GPU: moving structures, depth, errors, stream discipline.

`CudaTransfer`'s stream calls go through a `StreamRuntime`; here a fake one records them
while tensors move to the ``meta`` device (a real move that makes new tensors), so the
order of copy, event, wait and ``record_stream`` is checked on the CPU. tests/gpu runs the
same transfer on CUDA.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
import torch

from conveyor.engine.loop.device_prefetch import (
    CudaTransfer,
    DevicePrefetcher,
    HostTransfer,
    InFlight,
    move_to,
    transfer_for,
)

META = torch.device("meta")


class Pair(NamedTuple):
    image: torch.Tensor
    label: int


@dataclasses.dataclass(frozen=True)
class Sample:
    pixels: torch.Tensor
    name: str
    derived: int = dataclasses.field(init=False, default=0)


class Custom:
    """A batch type with its own ``to()``, which takes no ``non_blocking``."""

    def __init__(self, data: torch.Tensor):
        self.data = data

    def to(self, device: torch.device) -> Custom:
        return Custom(self.data.to(device))


def _batch() -> dict[str, Any]:
    t = torch.arange(6.0)
    return {
        "tensor": t,
        "pair": Pair(t + 1, 3),
        "list": [t, "text", b"raw"],
        "tuple": (t, 2.5),
        "ordered": OrderedDict(a=t),
        "sample": Sample(t, "s"),
        "custom": Custom(t),
        "none": None,
    }


def test_move_to_keeps_every_structure_and_lists_what_it_made() -> None:
    made: list[torch.Tensor] = []
    moved = move_to(_batch(), META, True, made)
    assert moved["tensor"].device == META and moved["pair"].image.device == META
    assert type(moved["pair"]) is Pair and moved["pair"].label == 3
    assert moved["list"][1:] == ["text", b"raw"] and moved["list"][0].device == META
    assert type(moved["tuple"]) is tuple and moved["tuple"][1] == 2.5
    assert type(moved["ordered"]) is OrderedDict and moved["ordered"]["a"].device == META
    assert type(moved["sample"]) is Sample and moved["sample"].pixels.device == META
    assert moved["sample"].name == "s"
    assert isinstance(moved["custom"], Custom) and moved["custom"].data.device == META
    assert moved["none"] is None
    assert len(made) == 7  # every tensor the moves created, the custom type's included


def test_move_to_the_same_device_makes_nothing() -> None:
    made: list[torch.Tensor] = []
    batch = _batch()
    moved = move_to(batch, torch.device("cpu"), False, made)
    assert moved["tensor"] is batch["tensor"]
    assert [t for t in made if t.device.type != "cpu"] == []


class _Broken:
    def to(self, device: torch.device, non_blocking: bool = False) -> Any:
        raise TypeError("unsupported dtype for this batch")


def test_a_type_error_inside_to_is_not_mistaken_for_a_signature() -> None:
    with pytest.raises(TypeError, match="unsupported dtype"):
        move_to(_Broken(), META, True, [])


# ------------------------------------------------------------------- stream discipline
class FakeRuntime:
    """Records stream calls; ``current`` is the consumer's stream, ``side`` the copies'."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.active = "current"

    def new_stream(self, device: torch.device) -> str:
        self.calls.append(("new_stream", device))
        return "side"

    def current_stream(self, device: torch.device) -> str:
        return self.active

    @contextlib.contextmanager
    def using(self, stream: str) -> Iterator[None]:
        before, self.active = self.active, stream
        self.calls.append(("enter", stream))
        try:
            yield
        finally:
            self.active = before
            self.calls.append(("exit", stream))

    def record_event(self, stream: str) -> str:
        self.calls.append(("record_event", stream))
        return f"event-{len(self.calls)}"

    def wait_event(self, stream: str, event: str) -> None:
        self.calls.append(("wait_event", stream, event))

    def wait_stream(self, stream: str, other: str) -> None:
        self.calls.append(("wait_stream", stream, other))

    def record_stream(self, tensor: torch.Tensor, stream: str) -> None:
        self.calls.append(("record_stream", tensor.device.type, stream))


def test_copies_run_on_the_side_stream_and_the_consumer_waits_for_them() -> None:
    runtime = FakeRuntime()
    transfer = CudaTransfer(META, runtime=runtime)
    host = {"a": torch.ones(3), "b": [torch.zeros(2)]}
    flight = transfer.start(host)
    assert runtime.calls[0] == ("new_stream", META)
    assert runtime.calls[1:] == [("enter", "side"), ("record_event", "side"), ("exit", "side")]
    assert flight.host is host and len(flight.made) == 2  # the host batch is kept meanwhile
    runtime.calls.clear()
    batch = transfer.hand_over(flight)
    event = flight.ready
    assert runtime.calls == [
        ("wait_event", "current", event),
        ("record_stream", "meta", "current"),
        ("record_stream", "meta", "current"),
    ]
    assert flight.host is None and batch["a"].device == META
    transfer.start({"a": torch.ones(1)})
    assert ("new_stream", META) not in runtime.calls  # one side stream per transfer


def test_device_sources_make_the_side_stream_wait_for_the_consumer() -> None:
    runtime = FakeRuntime()
    transfer = CudaTransfer(META, runtime=runtime)
    transfer.start({"made_on_a_device": torch.ones(2, device=META)})
    assert ("wait_stream", "side", "current") in runtime.calls


# ------------------------------------------------------------------------ the prefetcher
class Counting:
    """An iterator that counts how far it has been pulled; raises where told."""

    def __init__(self, n: int, raise_at: int | None = None) -> None:
        self.n = n
        self.raise_at = raise_at
        self.pulled = 0

    def __iter__(self) -> Counting:
        return self

    def __next__(self) -> torch.Tensor:
        if self.pulled >= self.n:
            raise StopIteration
        self.pulled += 1
        if self.pulled - 1 == self.raise_at:
            raise KeyError(f"bad sample {self.raise_at}")
        return torch.tensor([self.pulled - 1])


@pytest.mark.parametrize("depth", [0, 1, 2, 5])
def test_depth_batches_are_pulled_ahead_and_order_is_kept(depth: int) -> None:
    source = Counting(8)
    prefetcher = DevicePrefetcher(source, HostTransfer(torch.device("cpu")), depth)
    seen = []
    for batch in prefetcher:
        seen.append(int(batch))
        assert source.pulled == min(8, len(seen) + depth)
        assert prefetcher.in_flight == source.pulled - len(seen)
    assert seen == list(range(8)) and prefetcher.progress.finished


def test_states_follow_deliveries_not_pulls() -> None:
    source = Counting(6)
    prefetcher = DevicePrefetcher(
        source, HostTransfer(torch.device("cpu")), 3, snapshot=lambda: source.pulled
    )
    for k, _ in enumerate(prefetcher, start=1):
        assert prefetcher.progress.state == k  # the loader's state right after batch k
        assert prefetcher.progress.delivered == k


def test_an_error_is_raised_in_its_batchs_place_and_loading_goes_on() -> None:
    source = Counting(5, raise_at=2)
    prefetcher = DevicePrefetcher(source, HostTransfer(torch.device("cpu")), 2)
    assert [int(next(prefetcher)), int(next(prefetcher))] == [0, 1]
    with pytest.raises(KeyError, match="bad sample 2"):
        next(prefetcher)
    assert [int(b) for b in prefetcher] == [3, 4]


def test_a_failed_transfer_is_raised_in_its_batchs_place() -> None:
    class Failing(HostTransfer):
        def start(self, batch: Any) -> InFlight:
            if int(batch) == 1:
                raise RuntimeError("CUDA out of memory (pretend)")
            return super().start(batch)

    prefetcher = DevicePrefetcher(Counting(3), Failing(torch.device("cpu")), 2)
    assert int(next(prefetcher)) == 0
    with pytest.raises(RuntimeError, match="out of memory"):
        next(prefetcher)
    assert int(next(prefetcher)) == 2


# ------------------------------------------------------------------------- the device
def test_cuda_without_cuda_says_what_to_do() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match=r"device='cpu'.*without a GPU") as raised:
        transfer_for("cuda")
    assert "CUDA is not available" in str(raised.value)


def test_other_devices_are_refused() -> None:
    with pytest.raises(ValueError, match=r"'cuda'.*'cpu'"):
        transfer_for("meta")
    assert isinstance(transfer_for("cpu"), HostTransfer)
