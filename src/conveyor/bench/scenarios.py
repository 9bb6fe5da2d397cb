"""The bench's scenarios by id, and S1 (transfer of big batches) and S2 (tiny items).

Each scenario is a function ``settings -> iterator of Comparison``, one per configuration,
yielded as soon as it is measured. Loaders run with their defaults except the arguments
named here.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from conveyor.bench.harness import BenchSettings, Comparison, compare, loader_class
from conveyor.bench.images import run_s3
from conveyor.bench.startup import run_s4

__all__ = ["SCENARIOS", "ImagePool", "Scenario", "run_s1", "run_s2", "run_scenarios"]

Scenario = Callable[[BenchSettings], Iterator[Comparison]]

SHAPE = (3, 224, 224)
SAMPLE_BYTES = math.prod(SHAPE)
POOL = 256
PAGE = 4096
S1_BATCH = 64


class ImagePool:
    """Map-style, in memory: item i is ``pool[i % 256]`` (uint8 3x224x224), byte 0 = i % 256."""

    def __init__(self, length: int) -> None:
        generator = torch.Generator().manual_seed(0)
        pool = torch.randint(0, 256, (POOL, *SHAPE), dtype=torch.uint8, generator=generator)
        pool.view(POOL, -1)[:, 0] = torch.arange(POOL, dtype=torch.uint8)
        self.pool = pool
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.pool[index % POOL]


def _touch(batch: torch.Tensor) -> int:
    """Read one byte per 4 KiB page, as the least a pinned copy or H2D transfer does."""
    return int(batch.reshape(-1)[::PAGE].sum())


def _check_stamps(batch: torch.Tensor, first: int) -> None:
    stamps = batch.reshape(len(batch), -1)[:, 0]
    expected = (torch.arange(first, first + len(batch)) % POOL).to(torch.uint8)
    if not torch.equal(stamps, expected):
        raise RuntimeError(f"S1: batch starting at item {first} holds the wrong samples")


def _transfer_mb_s(loader: str, dataset: ImagePool, workers: int, batches: int) -> float:
    iterator: Any = iter(loader_class(loader)(dataset, batch_size=S1_BATCH, num_workers=workers))
    warm = 2 * workers + 2
    for _ in range(warm):
        _touch(next(iterator))
    start = time.perf_counter()
    for k in range(batches):
        batch = next(iterator)
        _touch(batch)
        _check_stamps(batch, (warm + k) * S1_BATCH)
    seconds = time.perf_counter() - start
    del batch, iterator  # shuts the workers down before the next measurement
    return batches * S1_BATCH * SAMPLE_BYTES / seconds / 1e6


def run_s1(settings: BenchSettings) -> Iterator[Comparison]:
    """S1: in-memory uint8 3x224x224 tensors, batch 64, MB/s; the consumer touches each page."""
    batches = math.ceil((150e6 if settings.quick else 600e6) / (S1_BATCH * SAMPLE_BYTES))
    warm = 2 * max(settings.num_workers) + 2
    dataset = ImagePool((warm + batches) * S1_BATCH)
    for workers in settings.num_workers:
        yield compare(
            f"S1 tensors bs64 nw{workers}",
            "MB/s",
            functools.partial(_transfer_mb_s, dataset=dataset, workers=workers, batches=batches),
            settings.reps,
            higher_is_better=True,
            params={"scenario_id": "s1", "num_workers": workers, "batch_size": S1_BATCH},
        )


def _tiny_us_per_batch(loader: str, batch_size: int, workers: int, batches: int) -> float:
    warm = 2 * workers + 2
    dataset = range((warm + batches) * batch_size)
    iterator: Any = iter(loader_class(loader)(dataset, batch_size=batch_size, num_workers=workers))
    for _ in range(warm):
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(iterator)
    seconds = time.perf_counter() - start
    if not (isinstance(batch, torch.Tensor) and batch.shape == (batch_size,)):
        raise RuntimeError(f"S2: expected an int64 tensor of {batch_size}, got {batch!r}")
    del batch, iterator  # shuts the workers down before the next measurement
    return seconds / batches * 1e6


def run_s2(settings: BenchSettings) -> Iterator[Comparison]:
    """S2: Python ints, batch 1 and 32, microseconds per batch (the fixed cost per batch)."""
    plan = {1: 200, 32: 100} if settings.quick else {1: 1000, 32: 400}
    for batch_size, batches in plan.items():
        for workers in settings.num_workers:
            yield compare(
                f"S2 ints bs{batch_size} nw{workers}",
                "us/batch",
                functools.partial(
                    _tiny_us_per_batch, batch_size=batch_size, workers=workers, batches=batches
                ),
                settings.reps,
                higher_is_better=False,
                params={"scenario_id": "s2", "num_workers": workers, "batch_size": batch_size},
            )


SCENARIOS: dict[str, Scenario] = {"s1": run_s1, "s2": run_s2, "s3": run_s3, "s4": run_s4}
"""Scenario id -> function, in run order."""


def run_scenarios(settings: BenchSettings, names: list[str]) -> Iterator[Comparison]:
    """Every comparison of the named scenarios (ids from `SCENARIOS`), in that order."""
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    for name in names:
        yield from SCENARIOS[name](settings)
