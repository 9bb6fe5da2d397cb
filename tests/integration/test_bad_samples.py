"""on_error="skip": bad samples are dropped, counted and reported; never silently."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conveyor import DataLoader
from conveyor.formats.errors import BadSampleWarning

from sample_datasets import Range, ShardedStream


class Flaky(Range):
    """Indices in ``bad`` raise (a corrupt file, say)."""

    def __init__(self, n: int, bad: set[int]):
        super().__init__(n)
        self.bad = bad

    def __getitem__(self, i: int) -> int:
        if i in self.bad:
            raise OSError(f"cannot decode sample {i}")
        return i


def _flat(batches: list[Any]) -> list[int]:
    return [int(x) for b in batches for x in (b if isinstance(b, torch.Tensor) else [b])]


@pytest.mark.parametrize(
    ("num_workers", "worker_type"), [(0, "process"), (2, "process"), (2, "thread")]
)
@pytest.mark.parametrize("batch_size", [None, 3])
def test_bad_samples_are_skipped_counted_and_reported(
    num_workers: int, worker_type: str, batch_size: int | None
) -> None:
    bad = {2, 6, 7, 8}  # with batch 3, batch [6, 7, 8] is dropped entirely
    loader = DataLoader(
        Flaky(12, bad),
        batch_size=batch_size,
        num_workers=num_workers,
        worker_type=worker_type,
        on_error="skip",
    )
    with pytest.warns(BadSampleWarning, match=r"skipped 4 samples.*index 2: OSError"):
        got = [b for b in loader]
    assert _flat(got) == [i for i in range(12) if i not in bad]
    assert loader.stats().skipped == 4
    if batch_size == 3:
        assert [b.tolist() for b in got] == [[0, 1], [3, 4, 5], [9, 10, 11]]


def test_max_skipped_stops_loading() -> None:
    loader = DataLoader(
        Flaky(20, set(range(0, 20, 2))), batch_size=4, on_error="skip", max_skipped=3
    )
    with pytest.raises(RuntimeError, match="more than max_skipped=3"):
        list(loader)


def test_default_policy_still_raises() -> None:
    with pytest.raises(OSError, match="cannot decode sample 2"):
        list(DataLoader(Flaky(5, {2}), batch_size=2))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_error": "ignore"}, "on_error should be one of"),
        ({"on_error": "skip", "max_skipped": -1}, "max_skipped"),
    ],
)
def test_bad_policy_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DataLoader(Range(3), **kwargs)


def test_skip_policy_is_refused_for_streams() -> None:
    with pytest.raises(ValueError, match="map-style datasets"):
        DataLoader(ShardedStream(0, 4), on_error="skip")
