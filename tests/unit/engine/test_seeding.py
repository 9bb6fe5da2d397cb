"""Worker seeds: NumPy's SeedSequence state computed in plain Python, as torch does."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from conveyor._utils.worker import _generate_state
from conveyor.engine.seeding import numpy_seed_state


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
