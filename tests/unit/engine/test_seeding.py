"""Worker seeds: NumPy's SeedSequence state computed in plain Python, as torch does."""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conveyor._utils.worker import _generate_state
from conveyor.engine.workers.seeding import numpy_seed_state, seed_torch


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**16))
def test_seed_state_is_numpys_seed_sequence(base_seed: int, worker_id: int) -> None:
    entropy = [worker_id, base_seed & 0xFFFFFFFF, base_seed >> 32, 0]
    expected = np.random.SeedSequence(entropy).generate_state(4).tolist()
    assert numpy_seed_state(base_seed, worker_id) == expected
    assert _generate_state(base_seed, worker_id) == expected


def test_seed_state_at_the_edges() -> None:
    for base_seed in (0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1):
        for worker_id in (0, 1, 63):
            entropy = [worker_id, base_seed & 0xFFFFFFFF, base_seed >> 32, 0]
            expected = np.random.SeedSequence(entropy).generate_state(4).tolist()
            assert numpy_seed_state(base_seed, worker_id) == expected


@pytest.mark.parametrize("seed", [0, 1, 2**32 + 7, 2**63 - 1])
def test_seed_torch_leaves_torchs_generator_state(seed: int) -> None:
    torch.manual_seed(seed)
    expected = torch.get_rng_state()
    torch.manual_seed(seed + 1)
    seed_torch(seed)
    assert torch.equal(torch.get_rng_state(), expected)
    assert torch.initial_seed() == seed


@pytest.mark.skipif(
    torch.cuda._is_compiled() or torch.xpu._is_compiled() or torch.mtia._is_compiled(),
    reason="an accelerator build seeds its devices lazily, as torch.manual_seed does",
)
def test_seed_torch_does_not_format_stacks_without_an_accelerator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch.manual_seed queues lazy device seeds with traceback.format_stack() each time.
    calls: list[int] = []
    real = traceback.format_stack

    def counting(*args: Any, **kwargs: Any) -> list[str]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(traceback, "format_stack", counting)
    torch.manual_seed(3)
    assert calls, "torch.manual_seed no longer formats stacks: seed_torch can just call it"
    calls.clear()
    seed_torch(3)
    assert calls == []
