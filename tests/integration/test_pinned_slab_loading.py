"""pin_memory=True with process workers and registered slabs, on a machine without CUDA.

The registrar is `FakeRegistrar` (tests/fake_registrar.py) and pinning is made possible by
monkeypatching, as in test_transport.py; everything else is real: worker processes, slabs,
the pin thread. The pin function stands for torch's: it checks that each batch already lies
in registered memory (so torch's ``pin_memory()`` would return it without a copy) and
enqueues the copy a ``non_blocking`` transfer would make, which the fake fences check was
never overwritten before it was due. tests/gpu runs the same on CUDA.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch

from conveyor import DataLoader
from conveyor.engine.loop import base_iterator
from conveyor.engine.workers import process_workers
from conveyor.engine.workers.pin_thread import PinningPool
from conveyor.transport.options import ENV_SLABS_PER_WORKER
from conveyor.transport.pinned_slabs import HostRegisterWarning

from fake_registrar import FakeRegistrar

IMG = (3, 64, 64)


class Images:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": torch.full(IMG, i % 251, dtype=torch.uint8), "label": i}


def _install(monkeypatch: pytest.MonkeyPatch, registrar: FakeRegistrar) -> list[int]:
    """Pinning possible, `registrar` used; returns the list of batches seen unregistered."""
    unregistered: list[int] = []

    def pin(batch: Any, device: Any = None) -> Any:
        image = batch["image"]
        if registrar.holds(image.data_ptr(), image.nbytes):
            registrar.enqueue_copy(image.data_ptr(), image.nbytes)
        else:
            unregistered.append(int(batch["label"][0]))
            batch = {key: value.clone() for key, value in batch.items()}  # torch's copy
        return batch

    monkeypatch.setattr(base_iterator, "pin_memory_available", lambda device="": True)
    monkeypatch.setattr(base_iterator, "pin_memory", pin)
    monkeypatch.setattr(process_workers, "cuda_registrar", lambda: registrar)
    return unregistered


def _check(batch: dict[str, Any], first: int) -> None:
    n = len(batch["label"])
    assert batch["label"].tolist() == list(range(first, first + n))
    expected = (torch.arange(first, first + n) % 251).to(torch.uint8)
    assert torch.equal(batch["image"][:, 0, 0, 0], expected)
    assert torch.equal(batch["image"][:, 2, 63, 63], expected)


@pytest.mark.parametrize("persistent", [False, True])
def test_batches_arrive_pinned_in_registered_slabs(
    monkeypatch: pytest.MonkeyPatch, persistent: bool
) -> None:
    registrar = FakeRegistrar()
    unregistered = _install(monkeypatch, registrar)
    loader = DataLoader(
        Images(192), batch_size=8, num_workers=2, pin_memory=True, persistent_workers=persistent
    )
    for _ in range(2):
        it = iter(loader)
        assert isinstance(it._pool, PinningPool)  # type: ignore[attr-defined]
        for k, batch in enumerate(it):
            _check(batch, 8 * k)
    assert unregistered == []  # every batch was pinned where the worker wrote it
    assert registrar.copies_enqueued == 48
    # each slab registered once, however many batches passed through it
    assert 0 < len(registrar.registered) <= 2 * 2 * (2 + 3)
    del it, loader, batch
    gc.collect()
    assert registrar.live == {} and len(registrar.unregistered) == len(registrar.registered)
    assert registrar.unmapped_at_unregister == [] and registrar.overwritten == 0


def test_slabs_are_reused_only_after_copies_from_them_completed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fences never complete by themselves: a worker short of slabs stalls, and the main
    # process waits for the fences of the slabs it releases before sending them back
    monkeypatch.setenv(ENV_SLABS_PER_WORKER, "2")
    registrar = FakeRegistrar(fences_done=False)
    _install(monkeypatch, registrar)
    loader = DataLoader(Images(160), batch_size=8, num_workers=2, pin_memory=True)
    for k, batch in enumerate(loader):
        _check(batch, 8 * k)
    assert registrar.synchronized > 0 and len(registrar.registered) <= 4
    del batch, loader
    gc.collect()
    assert registrar.overwritten == 0  # no copy ever saw a later batch's bytes
    # (a batch whose worker found no slab released in time travelled pickled, unregistered)
    assert registrar.copies_checked == registrar.copies_enqueued > 10
    assert registrar.live == {} and registrar.unmapped_at_unregister == []


def test_a_refused_registration_falls_back_to_copying_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registrar = FakeRegistrar(fail=True)
    unregistered = _install(monkeypatch, registrar)
    loader = DataLoader(Images(64), batch_size=8, num_workers=2, pin_memory=True)
    with pytest.warns(HostRegisterWarning, match="could not register"):
        batches = list(loader)
    for k, batch in enumerate(batches):
        _check(batch, 8 * k)
    assert sorted(unregistered) == list(range(0, 64, 8))  # each copied, as torch's pin thread does
    assert registrar.register_calls == 1  # not tried again


def test_without_pin_memory_nothing_is_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("a registrar was asked for without pin_memory=True")

    monkeypatch.setattr(process_workers, "cuda_registrar", refuse)
    for k, batch in enumerate(DataLoader(Images(32), batch_size=8, num_workers=2)):
        _check(batch, 8 * k)
