"""conveyor.to_device on CUDA: batches on the device, copies overlapping compute, exact resume.

Run on the device machine (scripts/gpu_check.sh); skipped without CUDA.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
import torch

from conveyor import DataLoader, to_device

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.filterwarnings("ignore:CUDA is initialised in this process:UserWarning"),
]


class Pair(NamedTuple):
    image: torch.Tensor
    label: torch.Tensor


@dataclasses.dataclass
class Boxed:
    values: torch.Tensor


class Samples:
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, Any]:
        image = torch.full((3, 32, 32), i % 251, dtype=torch.uint8)
        return {"pair": Pair(image, torch.tensor(i)), "list": [image.float()], "i": i}


def _collate_with_dataclass(samples: list[dict[str, Any]]) -> dict[str, Any]:
    from conveyor import default_collate

    batch = default_collate(samples)
    batch["boxed"] = Boxed(batch["pair"].image.clone())
    return batch


@pytest.mark.parametrize("depth", [0, 2])
def test_every_structure_arrives_on_the_device(depth: int) -> None:
    loader = DataLoader(
        Samples(), batch_size=8, num_workers=2, pin_memory=True, collate_fn=_collate_with_dataclass
    )
    for k, batch in enumerate(to_device(loader, "cuda", depth=depth)):
        ids = torch.arange(8 * k, 8 * k + 8, device="cuda")
        assert type(batch["pair"]) is Pair and batch["pair"].image.is_cuda
        assert torch.equal(batch["pair"].label, ids)
        assert torch.equal(batch["pair"].image[:, 0, 0, 0], (ids % 251).to(torch.uint8))
        assert batch["list"][0].is_cuda and batch["boxed"].values.is_cuda
        assert batch["i"].is_cuda


def test_a_checkpoint_on_cuda_counts_only_delivered_batches() -> None:
    def loader() -> Any:
        generator = torch.Generator().manual_seed(3)
        return DataLoader(Samples(), batch_size=4, shuffle=True, num_workers=2,
                          generator=generator, pin_memory=True)  # fmt: skip

    expected = [b["i"].tolist() for b in loader()]
    wrapped = to_device(loader(), "cuda", depth=3)
    iterator = iter(wrapped)
    seen = [next(iterator)["i"].tolist() for _ in range(5)]
    state = wrapped.state_dict()
    del iterator
    resumed = to_device(loader(), "cuda")
    resumed.load_state_dict(state)
    assert seen + [b["i"].tolist() for b in resumed] == expected


def _pinned_batches(count: int, nbytes: int) -> Iterator[torch.Tensor]:
    pool = [torch.full((nbytes,), k, dtype=torch.uint8).pin_memory() for k in range(2)]
    for k in range(count):
        yield pool[k % 2]


def _train(batches: Any, weight: torch.Tensor, steps: int) -> float:
    """Seconds for ``steps`` steps of ~10 ms of matrix products on each batch."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for batch in batches:
        x = batch[: 4096 * 4096].view(4096, 4096).to(torch.bfloat16)
        for _ in range(steps):
            x = (x @ weight).clamp_(-1, 1)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def test_copies_overlap_compute() -> None:
    nbytes = 512 << 20  # ~10-20 ms over PCIe/NVLink-C2C: comparable to a step
    weight = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
    probe = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    probe.to("cuda", non_blocking=True)
    end.record()
    end.synchronize()
    copy_ms = start.elapsed_time(end)
    steps = 1
    while steps < 64 and _train([torch.zeros(4096 * 4096, dtype=torch.uint8, device="cuda")],
                                weight, steps) * 1000 < copy_ms:  # fmt: skip
        steps *= 2
    batches = 12
    serial = _train(to_device(_pinned_batches(batches, nbytes), "cuda", depth=0), weight, steps)
    overlapped = _train(to_device(_pinned_batches(batches, nbytes), "cuda", depth=2), weight, steps)
    # serial pays copy + compute per batch; overlapped about the larger of the two
    assert overlapped < 0.8 * serial, (copy_ms, steps, serial, overlapped)
