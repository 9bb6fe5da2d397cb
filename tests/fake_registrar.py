"""A `HostRegistrar` for machines without CUDA: it records what a real one would be asked.

`FakeRegistrar` keeps the live registrations and checks, at every unregister, that the range
is still mapped (the order the real ``cudaHostUnregister`` needs). Its fences stand for CUDA
events: each captures the *copies* enqueued before it (`enqueue_copy`: address and bytes,
as ``tensor.to("cuda", non_blocking=True)`` would read them later), and when a fence
completes (`synchronize`, or `complete_all`) it checks that the memory still holds those
bytes, i.e. that no worker overwrote a slab while a copy from it was still due.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from conveyor.transport.cuda_host import HostRegisterError


def mapped(address: int) -> bool:
    """Whether ``address`` lies in a mapping of this process (/proc/self/maps)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            start, end = (int(x, 16) for x in line.split(maxsplit=1)[0].split("-"))
            if start <= address < end:
                return True
    return False


class FakeFence:
    """An event on one stream: completing it completes every fence made before it."""

    def __init__(self, owner: FakeRegistrar, copies: list[tuple[int, bytes]], done: bool):
        self.owner = owner
        self.copies = copies
        self.done = done
        if done:
            self._check()

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        if self.done:
            return
        self.owner.synchronized += 1
        for fence in self.owner.fences[: self.owner.fences.index(self) + 1]:
            if not fence.done:
                fence._check()
                fence.done = True

    def _check(self) -> None:
        for address, expected in self.copies:
            if ctypes.string_at(address, len(expected)) != expected:
                self.owner.overwritten += 1
        self.owner.copies_checked += len(self.copies)
        self.copies = []


class FakeRegistrar:
    """Records register/unregister; refuses every registration with ``fail=True``; its fences
    start complete (``fences_done=True``) or wait for ``synchronize``."""

    def __init__(self, fail: bool = False, fences_done: bool = True) -> None:
        self.fail = fail
        self.fences_done = fences_done
        self.lock = threading.Lock()
        self.live: dict[int, int] = {}  # address -> bytes
        self.registered: list[tuple[int, int]] = []
        self.unregistered: list[int] = []
        self.unmapped_at_unregister: list[int] = []  # must stay empty
        self.register_calls = 0
        self.fences: list[FakeFence] = []
        self.pending_copies: list[tuple[int, bytes]] = []
        self.copies_enqueued = 0
        self.copies_checked = 0
        self.synchronized = 0
        self.overwritten = 0

    # ---- HostRegistrar
    def register(self, address: int, nbytes: int) -> None:
        with self.lock:
            self.register_calls += 1
            if self.fail:
                raise HostRegisterError("cudaHostRegister failed: refused by the test")
            assert address not in self.live, "registered twice"
            self.live[address] = nbytes
            self.registered.append((address, nbytes))

    def unregister(self, address: int) -> None:
        with self.lock:
            if not mapped(address):
                self.unmapped_at_unregister.append(address)
            del self.live[address]
            self.unregistered.append(address)

    def fence(self) -> FakeFence:
        with self.lock:
            copies, self.pending_copies = self.pending_copies, []
            fence = FakeFence(self, copies, self.fences_done)
            self.fences.append(fence)
            return fence

    # ---- what the tests do
    def enqueue_copy(self, address: int, nbytes: int) -> None:
        """An asynchronous copy from ``address`` that a later fence covers."""
        with self.lock:
            self.pending_copies.append((address, ctypes.string_at(address, nbytes)))
            self.copies_enqueued += 1

    def holds(self, address: int, nbytes: int) -> bool:
        """Whether ``[address, address + nbytes)`` lies in one live registration."""
        with self.lock:
            return any(
                start <= address and address + nbytes <= start + size
                for start, size in self.live.items()
            )

    def complete_all(self) -> None:
        for fence in list(self.fences):
            fence.synchronize()


def tensors_in(batch: Any) -> list[Any]:
    """The torch tensors of a dict/list/tuple batch (one level deep is enough here)."""
    import torch

    values = batch.values() if isinstance(batch, dict) else batch
    return [v for v in values if isinstance(v, torch.Tensor)]
