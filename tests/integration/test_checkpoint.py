"""Checkpoint anywhere, resume in a fresh loader: the rest of the run is unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from conveyor import DataLoader, IterableDataset
from conveyor.datapipes.iter import IterableWrapper

from sample_datasets import Range


def _plain(batch: Any) -> Any:
    return batch.tolist() if isinstance(batch, torch.Tensor) else batch


def check_resume_everywhere(
    make: Callable[[], DataLoader[Any]], epochs: int = 2, positions: list[int] | None = None
) -> None:
    """For every position k of epoch 1 (the second), resume from a state taken there."""
    reference_loader = make()
    reference = [[_plain(b) for b in reference_loader] for _ in range(epochs)]
    flat = [b for epoch in reference for b in epoch]
    per_epoch = len(reference[0])
    assert reference[0] != [] and len(flat) == per_epoch * epochs
    for k in positions if positions is not None else range(per_epoch + 1):
        loader = make()
        list(loader)  # epoch 0 in full
        it = iter(loader)
        got = [_plain(next(it)) for _ in range(k)]
        state = loader.state_dict()
        del it
        resumed = make()
        resumed.load_state_dict(state)
        rest = [_plain(b) for b in resumed]
        assert got + rest == reference[1], f"resume at batch {k}"
        # and the epoch after the resumed one is the uninterrupted run's next epoch too
        if epochs > 2:
            assert [_plain(b) for b in resumed] == reference[2]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_single_process_map_style(shuffle: bool, batch_size: int | None) -> None:
    check_resume_everywhere(
        lambda: DataLoader(
            Range(10),
            batch_size=batch_size,
            shuffle=shuffle,
            generator=torch.Generator().manual_seed(1),
        ),
        epochs=3,
    )


def test_global_rng_shuffle_resumes() -> None:
    """No generator: the shuffle comes from torch's global RNG, which the state restores."""

    def make() -> DataLoader[Any]:
        return DataLoader(Range(9), batch_size=2, shuffle=True)

    torch.manual_seed(5)
    loader = make()
    it = iter(loader)
    first = [next(it).tolist() for _ in range(2)]
    state = loader.state_dict()
    rest = [b.tolist() for b in it]
    torch.manual_seed(123)  # whatever happened meanwhile
    resumed = make()
    resumed.load_state_dict(state)
    assert first + [b.tolist() for b in resumed] == first + rest


@pytest.mark.parametrize("worker_type", ["process", "thread"])
@pytest.mark.parametrize("persistent", [False, True])
def test_multi_worker_map_style(worker_type: str, persistent: bool) -> None:
    check_resume_everywhere(
        lambda: DataLoader(
            Range(14),
            batch_size=3,
            shuffle=True,
            num_workers=2,
            worker_type=worker_type,
            persistent_workers=persistent,
            generator=torch.Generator().manual_seed(2),
        ),
        positions=[0, 1, 3, 5],
    )


@pytest.mark.parametrize(("before", "after"), [(0, 2), (2, 0), (2, 1)])
def test_map_style_resumes_with_a_different_worker_count(before: int, after: int) -> None:
    def make(num_workers: int) -> DataLoader[Any]:
        return DataLoader(
            Range(20),
            batch_size=4,
            shuffle=True,
            num_workers=num_workers,
            generator=torch.Generator().manual_seed(8),
        )

    reference = [b.tolist() for b in make(before)]
    loader = make(before)
    it = iter(loader)
    got = [next(it).tolist() for _ in range(2)]
    state = loader.state_dict()
    del it
    resumed = make(after)
    resumed.load_state_dict(state)
    assert got + [b.tolist() for b in resumed] == reference


def test_state_counts_only_delivered_batches() -> None:
    loader = DataLoader(Range(40), batch_size=2, num_workers=2, prefetch_factor=4)
    it = iter(loader)
    next(it)
    next(it)  # workers have prefetched far more than two batches by now
    assert loader.state_dict()["yielded"] == 2
    del it


class CountingStream(IterableDataset[int]):
    """A stream that can seek: its state is the next number."""

    def __init__(self, n: int):
        self.n = n
        self.next_value = 0
        self.seeks = 0

    def __iter__(self) -> Any:
        while self.next_value < self.n:
            value = self.next_value
            self.next_value += 1
            yield value
        self.next_value = 0

    def state_dict(self) -> dict[str, Any]:
        return {"version": 1, "next": self.next_value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_value = state["next"]
        self.seeks += 1


def test_single_process_stream_seeks_instead_of_replaying() -> None:
    loader = DataLoader(CountingStream(10), batch_size=3)
    it = iter(loader)
    first = [next(it).tolist() for _ in range(2)]
    state = loader.state_dict()
    del it
    stream = CountingStream(10)
    resumed = DataLoader(stream, batch_size=3)
    resumed.load_state_dict(state)
    assert first + [b.tolist() for b in resumed] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert stream.seeks == 1


def test_single_process_datapipe_graph() -> None:
    def make() -> DataLoader[Any]:
        dp = IterableWrapper(range(12)).shuffle(buffer_size=5).map(lambda x: x * 2)
        return DataLoader(
            dp, batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(4)
        )

    check_resume_everywhere(make)


def test_state_between_epochs_continues_with_the_next_epoch() -> None:
    def make() -> DataLoader[Any]:
        return DataLoader(
            Range(6), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(0)
        )

    loader = make()
    list(loader)
    state = loader.state_dict()
    assert state["in_epoch"] is False
    expected = [b.tolist() for b in loader]
    resumed = make()
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == expected


def test_bad_state_version_is_rejected() -> None:
    with pytest.raises(ValueError, match="version"):
        DataLoader(Range(3)).load_state_dict({"version": 99})  # type: ignore[typeddict-item]


class ShardedCounting(IterableDataset[int]):
    """Worker w of n yields w, w+n, w+2n, ... below ``n_items``; seekable (has state).

    The usual protocol: ``state_dict`` describes the current iteration, and a loaded
    state applies to the next ``iter()``.
    """

    def __init__(self, n_items: int):
        self.n_items = n_items
        self.cursor = 0
        self._loaded: int | None = None

    def __iter__(self) -> Any:
        from conveyor import get_worker_info

        info = get_worker_info()
        worker, step = (0, 1) if info is None else (info.id, info.num_workers)
        self.cursor = worker if self._loaded is None else self._loaded
        self._loaded = None
        while self.cursor < self.n_items:
            value = self.cursor
            self.cursor += step
            yield value

    def state_dict(self) -> dict[str, Any]:
        return {"version": 1, "cursor": self.cursor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._loaded = state["cursor"]


class StatelessCounting(ShardedCounting):
    """The same stream without state: resuming must replay (read and drop)."""

    state_dict = None  # type: ignore[assignment]
    load_state_dict = None  # type: ignore[assignment]


@pytest.mark.parametrize("worker_type", ["process", "thread"])
@pytest.mark.parametrize("dataset_cls", [ShardedCounting, StatelessCounting])
def test_multi_worker_streams(worker_type: str, dataset_cls: type[ShardedCounting]) -> None:
    check_resume_everywhere(
        lambda: DataLoader(dataset_cls(23), batch_size=3, num_workers=2, worker_type=worker_type),
    )


def test_multi_worker_datapipe_graph() -> None:
    def make() -> DataLoader[Any]:
        dp = IterableWrapper(range(30)).shuffle(buffer_size=8).sharding_filter()
        return DataLoader(
            dp,
            batch_size=4,
            shuffle=True,
            num_workers=2,
            generator=torch.Generator().manual_seed(6),
        )

    check_resume_everywhere(make, positions=[0, 1, 2, 5, 8])


def test_stream_checkpoint_refuses_a_different_worker_count() -> None:
    loader = DataLoader(ShardedCounting(20), batch_size=2, num_workers=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    for num_workers in (0, 1):
        resumed = DataLoader(ShardedCounting(20), batch_size=2, num_workers=num_workers)
        resumed.load_state_dict(state)
        with pytest.raises(ValueError, match="num_workers=2"):
            next(iter(resumed))


def test_ready_first_checkpoint_loses_and_repeats_nothing() -> None:
    def make() -> DataLoader[Any]:
        return DataLoader(
            Range(30),
            batch_size=2,
            shuffle=True,
            num_workers=2,
            in_order=False,
            generator=torch.Generator().manual_seed(3),
        )

    for k in (0, 3, 7, 15):
        loader = make()
        it = iter(loader)
        got = [x for _ in range(k) for x in next(it).tolist()]
        state = loader.state_dict()
        del it
        resumed = make()
        resumed.load_state_dict(state)
        rest = [x for b in resumed for x in b.tolist()]
        assert sorted(got + rest) == list(range(30)), k


@pytest.mark.parametrize(("old_world", "new_world"), [(2, 3), (4, 2), (3, 1)])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_with_a_different_number_of_ranks(
    old_world: int, new_world: int, num_workers: int
) -> None:
    """Ranks run in step; the new job's ranks deal out exactly what nobody had seen yet."""
    from conveyor import DistributedSampler

    n, batch, k = 48, 2, 3

    def loader(world: int, rank: int) -> DataLoader[Any]:
        sampler = DistributedSampler(Range(n), num_replicas=world, rank=rank, seed=5)
        sampler.set_epoch(4)
        return DataLoader(Range(n), batch_size=batch, sampler=sampler, num_workers=num_workers)

    seen: list[int] = []
    states = []
    for rank in range(old_world):
        old = loader(old_world, rank)
        it = iter(old)
        seen += [x for _ in range(k) for x in next(it).tolist()]
        states.append(old.state_dict())
        del it
    assert len(seen) == len(set(seen)) == old_world * k * batch
    for rank in range(new_world):
        new = loader(new_world, rank)
        new.set_epoch = None  # type: ignore[attr-defined]  # the state brings the epoch back
        new.load_state_dict(states[rank % old_world])
        got = [x for b in new for x in b.tolist()]
        assert len(got) == len(new) * 0 + len(got)
        seen += got
    assert sorted(set(seen)) == list(range(n))  # every sample
    assert len(seen) - n < new_world  # at most the padding that keeps ranks equal


@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_after_breaking_out_of_the_loop_is_where_it_stopped(num_workers: int) -> None:
    """``for batch in loader: ... break`` drops the iterator; the checkpoint taken after
    it must still say where the loop stopped, not the start of the epoch (a replay)."""

    def make() -> DataLoader[Any]:
        return DataLoader(
            Range(40), batch_size=4, shuffle=True, num_workers=num_workers,
            generator=torch.Generator().manual_seed(1),
        )  # fmt: skip

    uninterrupted = [_plain(b) for b in make()]
    loader = make()
    got = []
    for batch in loader:
        got.append(_plain(batch))
        if len(got) == 3:
            break
    state = loader.state_dict()
    assert state["in_epoch"] and state["yielded"] == 3
    resumed = make()
    resumed.load_state_dict(state)
    assert got + [_plain(b) for b in resumed] == uninterrupted
    next(iter(loader))  # a new epoch on the same loader forgets the dropped one's state
    assert loader.state_dict()["yielded"] == 1
