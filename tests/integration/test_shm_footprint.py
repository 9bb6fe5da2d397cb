"""Shared memory held by conveyor's worker transport stays within 1.25x torch's, measured.

Issue 13: with 256 KiB batches every batch pinned a 1 MiB pre-faulted slab and the prefetch
limit did not count results waiting to be delivered, so /dev/shm peaked at 4x torch's. Both
loaders run here on the same dataset, one after the other, and the bytes of /dev/shm files
their process trees hold (open or mapped, unlinked or not) are sampled from a poller thread
and at every step of the loop, where both the previous and the current batch are alive.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.utils.data as torch_data
from shm_usage import shm_bytes_held

import conveyor

BATCH_SIZE = 16
SAMPLE_ELEMENTS = 4096  # float32: 16 KiB a sample, 256 KiB a batch
BATCHES = 40


class Floats(torch_data.Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return BATCH_SIZE * BATCHES

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((SAMPLE_ELEMENTS,), float(index))


class _Poller:
    """Samples `shm_bytes_held` in a thread until stopped; keeps the largest value."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shm-poller")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, shm_bytes_held())

    def __enter__(self) -> _Poller:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()


def _peak_shm_bytes(loader: Any) -> int:
    """Largest /dev/shm footprint of this process tree over one epoch of ``loader``."""
    peak = 0
    count = 0
    with _Poller() as poller:
        batches: Iterator[torch.Tensor] = iter(loader)
        previous = None
        for batch in batches:
            # the moment inside a for loop's next(): the last batch is still bound
            peak = max(peak, shm_bytes_held())
            assert batch.shape == (BATCH_SIZE, SAMPLE_ELEMENTS)
            assert float(batch[0, 0]) == BATCH_SIZE * count
            count += 1
            previous = batch
        del previous, batches
    assert count == BATCHES
    return max(peak, poller.peak)


@pytest.mark.parametrize("prefetch_factor", [1, 2, 8])
def test_shm_peak_is_within_a_quarter_of_torchs(prefetch_factor: int) -> None:
    kwargs: dict[str, Any] = {
        "batch_size": BATCH_SIZE,
        "num_workers": 2,
        "prefetch_factor": prefetch_factor,
    }
    torch_peak = _peak_shm_bytes(torch_data.DataLoader(Floats(), **kwargs))
    conveyor_peak = _peak_shm_bytes(conveyor.DataLoader(Floats(), **kwargs))
    batch_bytes = BATCH_SIZE * SAMPLE_ELEMENTS * 4
    # both measured for real: each holds at least the batches of its prefetch depth
    assert torch_peak >= 2 * prefetch_factor * batch_bytes
    assert conveyor_peak >= 2 * prefetch_factor * batch_bytes
    ratio = conveyor_peak / torch_peak
    assert ratio <= 1.25, f"conveyor {conveyor_peak} B vs torch {torch_peak} B: {ratio:.2f}x"
