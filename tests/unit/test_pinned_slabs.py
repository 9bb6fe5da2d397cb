"""Slabs registered as pinned memory, without a GPU: the bookkeeping with a fake registrar.

What a real ``cudaHostRegister`` needs is checked by `FakeRegistrar`: one registration per
slab, unregistration before the slab is unmapped, releases held until their fence (the
copies enqueued from the slab) is complete. The two ends talk through lists, as in
test_slab.py; the GPU tests (tests/gpu) run the same paths on CUDA.
"""

from __future__ import annotations

import gc
import os
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conveyor.collate import default_collate, set_output_allocator
from conveyor.engine.workers import process_workers
from conveyor.engine.workers.process_workers import ProcessWorkers
from conveyor.transport import cuda_host
from conveyor.transport.cuda_host import ENV_REGISTER_SLABS, CudaHostRegistrar, cuda_registrar
from conveyor.transport.main_end import SKIP, MainEnd
from conveyor.transport.options import SlabOptions
from conveyor.transport.pinned_slabs import HostRegisterWarning, PinnedSlabs, token_over
from conveyor.transport.protocol import OVERFLOW, RELEASE
from conveyor.transport.slab import create_slab, loader_prefix
from conveyor.transport.worker_end import WorkerEnd

from fake_registrar import FakeRegistrar, mapped


# ------------------------------------------------------------------ PinnedSlabs alone
def _slab(tmp_path: Path, size: int = 1 << 16) -> Any:
    mapping = create_slab(str(tmp_path), "slab", size)
    os.unlink(tmp_path / "slab")  # as the main end does: only mappings keep it
    return mapping


def test_root_is_registered_whole_and_unregistered_while_still_mapped(tmp_path: Path) -> None:
    registrar = FakeRegistrar()
    pinned = PinnedSlabs(registrar)
    root, registration = pinned.root(_slab(tmp_path))
    address = root.__array_interface__["data"][0]
    assert registration is not None and registrar.registered == [(address, root.nbytes)]
    token = token_over(root)
    view = torch.from_numpy(token[128:256])  # what a batch's tensor is
    del root, token
    gc.collect()
    assert registrar.unregistered == []  # the view keeps token, root and mapping
    assert mapped(address) and registrar.holds(view.data_ptr(), 128)
    del view
    gc.collect()
    assert registrar.unregistered == [address]
    assert registrar.unmapped_at_unregister == []  # unregistered first ...
    assert not mapped(address)  # ... then unmapped
    assert (pinned.registered, pinned.unregistered, pinned.registered_bytes) == (1, 1, 0)


def test_views_of_a_token_keep_that_token_alive(tmp_path: Path) -> None:
    # the release of a batch depends on it: its finalizer must wait for the batch's views
    pinned = PinnedSlabs(FakeRegistrar())
    root, _ = pinned.root(_slab(tmp_path))
    token = token_over(root)
    died: list[bool] = []
    import weakref

    weakref.finalize(token, died.append, True)
    view = torch.from_numpy(token[64:128].view(np.uint8))
    del token
    gc.collect()
    assert died == []
    del view
    gc.collect()
    assert died == [True]


def test_unregistering_waits_for_the_last_release_fence(tmp_path: Path) -> None:
    registrar = FakeRegistrar(fences_done=False)
    pinned = PinnedSlabs(registrar)
    root, registration = pinned.root(_slab(tmp_path))
    token = token_over(root)
    registrar.enqueue_copy(token.__array_interface__["data"][0], 64)
    fence = pinned.fence(registration)  # the token's death records it
    del token, root
    gc.collect()
    assert fence is not None and fence.query()  # synchronized before the unregister
    assert registrar.synchronized == 1 and registrar.copies_checked == 1
    assert len(registrar.unregistered) == 1 and registrar.unmapped_at_unregister == []


def test_a_refused_registration_warns_once_and_pins_nothing_more(tmp_path: Path) -> None:
    registrar = FakeRegistrar(fail=True)
    pinned = PinnedSlabs(registrar)
    with pytest.warns(HostRegisterWarning, match="copies each batch into pinned memory"):
        root, registration = pinned.root(_slab(tmp_path))
    assert registration is None and not pinned.active and root.nbytes == 1 << 16
    again, registration = pinned.root(_slab(tmp_path))  # no second warning (warnings=error)
    assert registration is None and registrar.register_calls == 1
    assert pinned.fence(registration) is None  # an unregistered slab is released at once
    del root, again


# --------------------------------------------------------- both ends joined by lists
class PinnedWire:
    """A worker end and a main end with registered slabs, joined by lists instead of pipes."""

    def __init__(self, tmp_path: Path, registrar: FakeRegistrar, **options: Any):
        prefix = loader_prefix()
        self.config = SlabOptions(shm_dir=str(tmp_path), **options).resolve(prefix, 1, 2)
        self.to_worker: deque[Any] = deque()
        self.frames: deque[bytes] = deque()
        self.registrar = registrar
        self.main = MainEnd(self.config, self._control, PinnedSlabs(registrar))
        self.on_empty: Callable[[], None] | None = None
        self.worker = WorkerEnd(self.config, 0, self._receive, self.frames.append)
        self._previous = set_output_allocator(self.worker.allocate)

    def _control(self, worker_id: int, message: Any) -> None:
        self.to_worker.append(message)

    def _receive(self) -> Any:
        if not self.to_worker and self.on_empty is not None:
            self.on_empty()
        return self.to_worker.popleft()

    def produce(self, value: int, count: int = 16) -> None:
        self.to_worker.append((0, 0, None))
        assert self.worker.receive() == (0, 0, None)
        batch = default_collate([torch.full((3, 64, 64), value, dtype=torch.uint8)] * count)
        self.worker.send((0, 0, batch))

    def deliver(self) -> torch.Tensor:
        while True:
            message = self.main.decode(0, self.frames.popleft())
            if message is not SKIP:
                batch: torch.Tensor = message[2]
                return batch

    def close(self) -> None:
        set_output_allocator(self._previous)
        self.worker.close()
        self.main.close()


@pytest.fixture
def wire(tmp_path: Path) -> Iterator[Callable[..., PinnedWire]]:
    made: list[PinnedWire] = []

    def make(registrar: FakeRegistrar | None = None, **options: Any) -> PinnedWire:
        made.append(PinnedWire(tmp_path, registrar or FakeRegistrar(), **options))
        return made[-1]

    yield make
    for each in made:
        each.close()


def test_batches_view_registered_slabs_and_reuse_registers_nothing(
    wire: Callable[..., PinnedWire],
) -> None:
    w = wire()
    addresses = set()
    for value in range(5):
        w.produce(value)
        batch = w.deliver()
        assert int(batch[3, 0, 0, 0]) == value
        assert w.registrar.holds(batch.data_ptr(), batch.nbytes)  # no second copy needed
        addresses.add(batch.data_ptr())
        del batch
        gc.collect()
        w.main.before_wait()  # sends the release (its fence is complete)
    assert len(addresses) == 1 and len(w.registrar.registered) == 1  # one slab, once


def test_a_release_waits_for_its_fence(wire: Callable[..., PinnedWire]) -> None:
    w = wire(FakeRegistrar(fences_done=False))
    w.produce(1)
    batch = w.deliver()
    w.registrar.enqueue_copy(batch.data_ptr(), batch.nbytes)  # the user's .to("cuda")
    del batch
    gc.collect()
    w.main.before_wait()
    assert not w.to_worker  # the copy may still be reading the slab: no release yet
    w.registrar.complete_all()
    w.main.before_wait()
    assert [m[0] for m in w.to_worker] == [RELEASE]
    assert w.registrar.overwritten == 0 and w.registrar.copies_checked == 1


def test_a_stalled_worker_gets_its_slab_once_the_fence_completes(
    wire: Callable[..., PinnedWire],
) -> None:
    w = wire(FakeRegistrar(fences_done=False), slabs_per_worker=1)
    w.produce(0)
    held = [w.deliver()]
    w.registrar.enqueue_copy(held[0].data_ptr(), held[0].nbytes)

    def main_side() -> None:  # the user drops the batch; the main end sees the stall
        held.clear()
        gc.collect()
        assert w.main.decode(0, w.frames.popleft()) is SKIP
        assert [m[0] for m in w.to_worker] == [RELEASE, OVERFLOW]

    w.on_empty = main_side
    w.produce(1)
    batch = w.deliver()
    assert int(batch[0, 0, 0, 0]) == 1 and w.registrar.synchronized == 1
    assert w.registrar.overwritten == 0  # the copy saw batch 0's bytes to the end
    assert len(w.registrar.registered) == 1  # the same slab, reused (not pickled)


def test_a_retired_slab_is_unregistered_after_its_last_view_then_unmapped(
    wire: Callable[..., PinnedWire],
) -> None:
    w = wire(slabs_per_worker=1)
    w.produce(0, count=2)  # a small slab
    small = w.deliver()
    address = w.registrar.registered[0][0]
    del small
    gc.collect()
    w.main.before_wait()
    w.produce(1, count=32)  # needs a bigger slab: the small one is retired
    big = w.deliver()  # its frame tells the main end, which drops its root
    assert w.registrar.unregistered == [address] and w.registrar.unmapped_at_unregister == []
    assert not mapped(address)
    assert int(big[31, 0, 0, 0]) == 1 and w.registrar.holds(big.data_ptr(), big.nbytes)


def test_batches_outlive_the_closed_loader_then_unregister(
    wire: Callable[..., PinnedWire],
) -> None:
    w = wire(FakeRegistrar(fences_done=False))
    w.produce(7)
    batch = w.deliver()
    w.registrar.enqueue_copy(batch.data_ptr(), batch.nbytes)
    w.close()
    gc.collect()
    assert int(batch[0, 0, 0, 0]) == 7 and w.registrar.unregistered == []
    del batch
    gc.collect()
    assert len(w.registrar.unregistered) == 1 and w.registrar.synchronized == 1
    assert w.registrar.unmapped_at_unregister == [] and w.registrar.overwritten == 0


# ------------------------------------------------------------------------- selection
def test_no_registrar_without_cuda_or_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cuda_registrar() is None  # this machine has no CUDA
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cuda")
    )
    assert isinstance(cuda_registrar(), CudaHostRegistrar)
    monkeypatch.setenv(ENV_REGISTER_SLABS, "0")
    assert cuda_registrar() is None
    monkeypatch.delenv(ENV_REGISTER_SLABS)
    monkeypatch.setattr(
        torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("mps")
    )
    assert cuda_registrar() is None
    assert cuda_host.cuda_registrar is cuda_registrar


def test_process_workers_ask_for_a_registrar_only_when_pinning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[bool] = []
    monkeypatch.setattr(process_workers, "cuda_registrar", lambda: asked.append(True))
    made: list[Any] = []

    class Pool:
        def __init__(self, setup: Any, context: Any, zygote: Any, registrar: Any) -> None:
            made.append(registrar)

    monkeypatch.setattr(process_workers, "ProcessPool", Pool)
    monkeypatch.setattr(process_workers, "PinningPool", lambda pool, pin: pool)
    import multiprocessing
    from types import SimpleNamespace

    workers = SimpleNamespace(context=multiprocessing.get_context(), share_records=False)
    setup: Any = SimpleNamespace(workers=workers)
    ProcessWorkers().start_pool(setup, None)
    assert asked == [] and made == [None]
    ProcessWorkers().start_pool(setup, lambda batch: batch)
    assert asked == [True]
