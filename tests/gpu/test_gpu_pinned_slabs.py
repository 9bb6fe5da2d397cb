"""Registered slabs on CUDA: batches pinned where workers wrote them, copies never overwritten.

Run on the device machine (scripts/gpu_check.sh); skipped without CUDA.
tests/integration/test_pinned_slab_loading.py checks the same bookkeeping without a GPU.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch

from conveyor import DataLoader
from conveyor.transport.cuda_host import ENV_REGISTER_SLABS
from conveyor.transport.options import ENV_SLABS_PER_WORKER

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.filterwarnings("ignore:CUDA is initialised in this process:UserWarning"),
]
IMG = (3, 224, 224)


class Images:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"image": torch.full(IMG, i % 251, dtype=torch.uint8), "label": i}


def _slab_ranges() -> list[tuple[int, int]]:
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "/conveyor-" in line:
                start, end = (int(x, 16) for x in line.split(maxsplit=1)[0].split("-"))
                ranges.append((start, end))
    return ranges


def _in_a_slab(tensor: torch.Tensor) -> bool:
    address = tensor.data_ptr()
    return any(start <= address < end for start, end in _slab_ranges())


def _expected(first: int, n: int, device: str = "cpu") -> torch.Tensor:
    return (torch.arange(first, first + n, device=device) % 251).to(torch.uint8)


def test_batches_are_pinned_where_the_workers_wrote_them() -> None:
    loader = DataLoader(Images(256), batch_size=32, num_workers=2, pin_memory=True)
    it = iter(loader)
    pinned = it._pool._pool.pinned_slabs  # type: ignore[attr-defined]
    assert pinned is not None
    for k, batch in enumerate(it):
        image = batch["image"]
        assert image.is_pinned() and _in_a_slab(image)  # pinned, and no second copy
        assert torch.equal(image[:, 0, 0, 0], _expected(32 * k, 32))
    assert 1 <= pinned.registered <= 2 * (2 + 3) and pinned.active
    del it, batch, image
    gc.collect()
    assert pinned.unregistered == pinned.registered


def test_without_registration_the_pin_thread_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_REGISTER_SLABS, "0")
    for k, batch in enumerate(
        DataLoader(Images(64), batch_size=32, num_workers=2, pin_memory=True)
    ):
        assert batch["image"].is_pinned() and not _in_a_slab(batch["image"])
        assert torch.equal(batch["image"][:, 0, 0, 0], _expected(32 * k, 32))


@pytest.mark.parametrize("slabs_per_worker", ["2", ""])
def test_slabs_are_not_reused_while_copies_from_them_are_queued(
    monkeypatch: pytest.MonkeyPatch, slabs_per_worker: str
) -> None:
    if slabs_per_worker:
        monkeypatch.setenv(ENV_SLABS_PER_WORKER, slabs_per_worker)
    loader = DataLoader(Images(512), batch_size=32, num_workers=2, pin_memory=True)
    copies = []
    for batch in loader:
        torch.cuda._sleep(20_000_000)  # the GPU is busy: the copy below runs ~10 ms later
        copies.append(batch["image"].to("cuda", non_blocking=True))
        del batch  # the slab's release must wait for that copy
    torch.cuda.synchronize()
    for k, copy in enumerate(copies):
        assert torch.equal(copy[:, 0, 0, 0], _expected(32 * k, 32, "cuda"))
        assert torch.equal(copy[:, 2, 223, 223], _expected(32 * k, 32, "cuda"))
