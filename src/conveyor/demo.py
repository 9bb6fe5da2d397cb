"""The README's main job: load a dataset with workers and print throughput.

Run with ``python -m conveyor.demo [--num-workers N] [--epochs E]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
import torch

from conveyor import DataLoader, Dataset


class SyntheticImages(Dataset[tuple[np.ndarray, int]]):
    """Deterministic uint8 "images" with labels: the shape of a real vision dataset."""

    def __init__(self, length: int, side: int):
        self._length = length
        self._side = side

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        image = np.full((3, self._side, self._side), index % 251, dtype=np.uint8)
        return image, index % 10


def _epoch(loader: DataLoader[tuple[np.ndarray, int]]) -> tuple[int, int, float]:
    samples = bytes_seen = 0
    start = time.perf_counter()
    for images, labels in loader:
        samples += int(labels.shape[0])
        bytes_seen += images.numel() * images.element_size()
    return samples, bytes_seen, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--side", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--worker-type", choices=("process", "thread"), default="process")
    args = parser.parse_args(argv)

    dataset = SyntheticImages(args.samples, args.side)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        generator=torch.Generator().manual_seed(0),
        persistent_workers=args.num_workers > 0,
        worker_type=args.worker_type,
    )
    print(
        f"conveyor demo: {args.samples} samples of 3x{args.side}x{args.side} uint8, "
        f"batch {args.batch_size}, {args.num_workers} {args.worker_type} workers"
    )
    for epoch in range(args.epochs):
        samples, nbytes, seconds = _epoch(loader)
        print(
            f"epoch {epoch}: {samples} samples in {seconds:.2f} s = "
            f"{samples / seconds:,.0f} samples/s, {nbytes / seconds / 1e6:,.0f} MB/s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
