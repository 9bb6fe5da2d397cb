"""Per-sample random generators: augmentations that resume (``DataLoader(sample_seed=)``).

Exact resume restores which samples come, not the random augmentations drawn while
loading them: a worker's RNG streams depend on how many samples it drew before, so they
differ after a resume, with thread workers, or with another ``num_workers``. With
``sample_seed`` set, `sample_generators()` gives the sample being loaded its own
generators (``random``, torch, NumPy), seeded from ``(sample_seed, epoch, index)``: the
same draws for that sample in every run, on any worker count or kind, resumed or not.

Map-style datasets call it with no argument inside ``__getitem__`` (the loader knows the
index being fetched); a stream or a pipeline stage passes the sample's own identity
(``sample_generators(sample["__key__"])``). The context is thread-local: thread workers
each have their own, and nothing global (torch's RNG) is touched.
"""

from __future__ import annotations

import random
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

__all__ = ["SampleGenerators", "sample_context", "sample_generators", "seeding_epoch"]

_MASK = (1 << 64) - 1


class _Context(threading.local):
    seed: int | None = None
    epoch: int = 0
    index: Any = None


_context = _Context()


class SampleGenerators:
    """One sample's generators: ``random`` (a `random.Random`), ``torch`` (a
    `torch.Generator`), ``numpy`` (a `numpy.random.Generator`), all from one seed."""

    __slots__ = ("_numpy", "_random", "_torch", "seed")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._random: random.Random | None = None
        self._torch: torch.Generator | None = None
        self._numpy: np.random.Generator | None = None

    @property
    def random(self) -> random.Random:
        if self._random is None:
            self._random = random.Random(self.seed)
        return self._random

    @property
    def torch(self) -> torch.Generator:
        if self._torch is None:
            self._torch = torch.Generator().manual_seed(self.seed & ((1 << 63) - 1))
        return self._torch

    @property
    def numpy(self) -> np.random.Generator:
        if self._numpy is None:
            self._numpy = np.random.default_rng(self.seed)
        return self._numpy


def _identity(value: Any) -> int:
    if type(value) is int:
        return value & _MASK
    raw = str(value).encode()
    return zlib.crc32(raw) | (zlib.crc32(raw, 0x5BD1E995) << 32)


def _mix(*parts: int) -> int:
    """SplitMix64 over the parts: one well-spread 64-bit seed."""
    x = 0
    for part in parts:
        x = (x ^ (part & _MASK)) + 0x9E3779B97F4A7C15 & _MASK
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
        x ^= x >> 31
    return x


def sample_generators(identity: Any = None) -> SampleGenerators:
    """Generators for the sample being loaded, seeded from ``(sample_seed, epoch, identity)``:
    draw a sample's augmentations from them and they are the same in every run, on any
    worker count or kind, resumed or not.

    Args:
        identity: the sample's own (a key, a path); by default the index a map-style
            dataset is being asked for.

    Raises:
        RuntimeError: outside a loader built with ``sample_seed``, or in a stream without
            an ``identity``.
    """
    context = _context
    if context.seed is None:
        raise RuntimeError(
            "conveyor.sample_generators() needs a DataLoader built with sample_seed=... "
            "(and is called while it loads a sample)"
        )
    if identity is None:
        identity = context.index
        if identity is None:
            raise RuntimeError(
                "conveyor.sample_generators(): no index is being fetched here (a stream, or "
                "a batched __getitems__): pass the sample's identity, e.g. its key"
            )
    return SampleGenerators(_mix(context.seed, context.epoch, _identity(identity)))


@contextmanager
def seeding_epoch(seed: int | None, epoch: int) -> Iterator[None]:
    """While fetching a batch of epoch ``epoch`` (``seed`` None: sample seeding off)."""
    context = _context
    saved = (context.seed, context.epoch, context.index)
    context.seed, context.epoch, context.index = seed, epoch, None
    try:
        yield
    finally:
        context.seed, context.epoch, context.index = saved


@contextmanager
def sample_context(index: Any) -> Iterator[None]:
    """While ``dataset[index]`` runs: `sample_generators()` seeds from ``index``."""
    context = _context
    saved, context.index = context.index, index
    try:
        yield
    finally:
        context.index = saved
