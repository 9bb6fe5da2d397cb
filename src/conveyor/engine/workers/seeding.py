"""Worker seeding, identical to torch's so augmentations reproduce across the two loaders.

A worker's NumPy seed is computed here in plain Python (NumPy's ``SeedSequence`` mixing, as
torch computes it too), and NumPy's global generator is seeded the moment ``numpy.random``
is first imported in the worker (`seed_numpy_global`): importing ``numpy.random`` costs a
worker ~10 ms of its start, which a dataset that never draws from NumPy need not pay. The
generator's state at its first use is the same either way.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import random
import sys
from types import ModuleType
from typing import Any, NamedTuple

import torch

__all__ = [
    "EpochSeeds",
    "draw_base_seed",
    "numpy_seed_state",
    "seed_numpy_global",
    "seed_process_rngs",
    "seed_torch",
]

MASK32 = 0xFFFFFFFF

# NumPy's SeedSequence constants (O'Neill's seed_seq_fe): a pool of 4 words.
_POOL_SIZE = 4
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R = 0xCA01F9DD, 0x4973F715
_XSHIFT = 16


class EpochSeeds(NamedTuple):
    """The seeds of one epoch: the workers' base seed and the graph seed every worker and
    rank shares (DataPipe graphs only, else None)."""

    base_seed: int
    shared_seed: int | None = None


def draw_base_seed(generator: torch.Generator | None) -> int:
    """One 64-bit draw from the loader's generator, exactly where and how torch draws it."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


class _HashMix:
    """SeedSequence's hash: each call mixes one word with a constant that moves on."""

    def __init__(self, start: int, multiplier: int) -> None:
        self.constant = start
        self.multiplier = multiplier

    def __call__(self, value: int) -> int:
        value = (value ^ self.constant) & MASK32
        self.constant = (self.constant * self.multiplier) & MASK32
        value = (value * self.constant) & MASK32
        return value ^ (value >> _XSHIFT)


def _mix(x: int, y: int) -> int:
    result = (_MIX_MULT_L * x - _MIX_MULT_R * y) & MASK32
    return result ^ (result >> _XSHIFT)


def numpy_seed_state(base_seed: int, worker_id: int) -> list[int]:
    """NumPy's seed for a worker: ``SeedSequence([worker_id, base_seed & 0xFFFFFFFF,
    base_seed >> 32, 0]).generate_state(4)``, as torch builds it, in plain Python.

    The entropy differs from ``random``'s seed so that the ``numpy.random`` and ``random``
    streams differ even though both derive from ``base_seed``.
    """
    entropy = [worker_id & MASK32, base_seed & MASK32, (base_seed >> 32) & MASK32, 0]
    hash_a = _HashMix(_INIT_A, _MULT_A)
    pool = [hash_a(word) for word in entropy]
    for source in range(_POOL_SIZE):
        for target in range(_POOL_SIZE):
            if source != target:
                pool[target] = _mix(pool[target], hash_a(pool[source]))
    hash_b = _HashMix(_INIT_B, _MULT_B)
    return [hash_b(word) for word in pool]


def seed_process_rngs(base_seed: int, worker_id: int) -> int:
    """Seed ``random``, torch and NumPy global state for a process worker; returns the seed."""
    seed = base_seed + worker_id
    random.seed(seed)
    seed_torch(seed)
    seed_numpy_global(numpy_seed_state(base_seed, worker_id))
    return seed


def seed_torch(seed: int) -> None:
    """``torch.manual_seed(seed)``, without its cost on a build that has no accelerator.

    ``torch.manual_seed`` also queues seeds for CUDA, XPU and MTIA generators, built or not,
    and formats the caller's stack for each (reading every source file on it): 2-7 ms of a
    fresh worker's start, before its first batch. Where none of them (nor MPS or a custom
    device) is built, the CPU generator is all it seeds, and that is all this seeds.
    """
    if _has_accelerator_build():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


@functools.cache
def _has_accelerator_build() -> bool:
    return bool(
        torch.cuda._is_compiled()
        or torch.xpu._is_compiled()
        or torch.mtia._is_compiled()
        or torch.backends.mps.is_built()
        or torch._C._get_privateuse1_backend_name() != "privateuseone"
    )


def seed_numpy_global(state: list[int]) -> None:
    """``numpy.random.seed(state)`` now if ``numpy.random`` is imported, else as it is."""
    module = sys.modules.get("numpy.random")
    if module is not None:
        module.seed(state)
        return
    for finder in list(sys.meta_path):
        if isinstance(finder, _SeedWhenImported):
            sys.meta_path.remove(finder)  # a later seeding replaces an earlier one
    sys.meta_path.insert(0, _SeedWhenImported(state))


class _SeedWhenImported(importlib.abc.MetaPathFinder):
    """Finds ``numpy.random`` through the other finders and seeds it once it has run."""

    def __init__(self, state: list[int]) -> None:
        self._state = state

    def find_spec(
        self, fullname: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "numpy.random":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                None if find is None else find(fullname, path, target)
            )
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _SeedingLoader(spec.loader, self._state)
                return spec
        return None


class _SeedingLoader(importlib.abc.Loader):
    """Runs NumPy's own loader, seeds the module, then puts NumPy's loader back."""

    def __init__(self, inner: Any, state: list[int]) -> None:
        self._inner = inner
        self._state = state

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self._inner.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        if spec is not None:
            spec.loader = self._inner
        module.__loader__ = self._inner
        self._inner.exec_module(module)
        module.seed(self._state)
