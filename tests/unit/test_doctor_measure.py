"""The doctor's measured run holds no more batches than a training loop does.

A batch held through the run keeps its shared-memory slab: with the replay's four batches
kept from the start, the pin scenario's pin_memory=False run paid ~1.2 ms more per batch
in next(), and the doctor's measured gain fell short of its (right) prediction.
"""

from __future__ import annotations

from collections.abc import Iterator

from conveyor.doctor.measure import KEPT_BATCHES, measure
from conveyor.stats.report import LoaderStats


class _Batch:
    alive = 0

    def __init__(self) -> None:
        _Batch.alive += 1

    def __del__(self) -> None:
        _Batch.alive -= 1


class _Loader:
    """Yields fresh batches; ``len`` as a DataLoader's."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[_Batch]:
        return (_Batch() for _ in range(self.n))

    def stats(self) -> LoaderStats:
        return LoaderStats(batches=self.n, samples=self.n, wait_s=0.0, compute_s=0.0)


def test_batches_are_not_held_through_the_run_and_the_replay_still_gets_its_batches() -> None:
    batches = 32
    alive: list[int] = []
    run, kept = measure(_Loader(1000), lambda batch: alive.append(_Batch.alive), batches, 60.0)
    # the step's own batch only, until the last few (kept for the replay)
    assert alive[: batches - KEPT_BATCHES] == [1] * (batches - KEPT_BATCHES)
    assert len(kept) == KEPT_BATCHES and run.wall_s > 0


def test_a_run_cut_short_by_its_deadline_takes_the_replay_batches_after_it() -> None:
    _, kept = measure(_Loader(1000), lambda batch: None, 32, 0.0)
    assert len(kept) == KEPT_BATCHES


def test_a_loader_shorter_than_the_run_keeps_its_first_batch_for_the_replay() -> None:
    _, kept = measure(_Loader(2), lambda batch: None, 32, 60.0)
    assert len(kept) == 2
