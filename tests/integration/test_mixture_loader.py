"""Mixture through conveyor's DataLoader: same samples, exact resume, no silent duplication."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from test_checkpoint import check_resume_everywhere

from conveyor import DataLoader, IterableDataset, Mixture
from conveyor.datapipes.iter import IterableWrapper


class Squares(IterableDataset[str]):
    """A stream without state (resumed by reading it again)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        return (f"sq{i * i}" for i in range(self.n))


def make_mixture(stop_on: str = "first_exhausted") -> Mixture:
    sources = {
        "letters": [f"{c}{i}" for i in range(3) for c in "abcdefghij"],
        "squares": Squares(40),
        "pipe": IterableWrapper([f"p{i}" for i in range(25)]),  # a stream with state
    }
    return Mixture(sources, {"letters": 0.5, "squares": 0.3, "pipe": 0.2}, stop_on=stop_on)  # type: ignore[arg-type]


TOPOLOGIES = [(0, "process"), (1, "process"), (2, "process"), (3, "process"), (2, "thread")]
many_workers = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def mixture_loader(
    num_workers: int, worker_type: str = "process", batch_size: int = 4, **kwargs: Any
) -> DataLoader[Any]:
    return DataLoader(
        make_mixture(**kwargs),
        batch_size=batch_size,
        num_workers=num_workers,
        worker_type=worker_type,
    )


def flat(loader: Any) -> list[str]:
    return [x for batch in loader for x in batch]


@many_workers
@pytest.mark.parametrize(("num_workers", "worker_type"), TOPOLOGIES)
def test_loader_delivers_the_mixture_in_order(num_workers: int, worker_type: str) -> None:
    """Workers produce disjoint positions (the loader calls Mixture.configure in each):
    the output is the single-process mixture's, sample for sample."""
    expected = list(make_mixture())
    loader = mixture_loader(num_workers, worker_type)
    assert flat(loader) == expected
    epochs = []
    for epoch in range(2):
        loader.dataset.set_epoch(epoch)  # type: ignore[attr-defined]
        epochs.append(flat(loader))
    assert epochs[0] == expected
    assert len(epochs[1]) == len(expected) and epochs[1] != expected  # reshuffled


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_loader_checkpoint_resumes_the_mixture_anywhere(num_workers: int) -> None:
    check_resume_everywhere(
        lambda: DataLoader(make_mixture(), batch_size=3, num_workers=num_workers),
        positions=[0, 1, 5, 9] if num_workers else None,
    )


@many_workers
@pytest.mark.parametrize("before", [(2, "process"), (0, "process"), (3, "thread")])
@pytest.mark.parametrize("after", [(3, "process"), (0, "process"), (2, "thread")])
@pytest.mark.parametrize("step", [0, 2, 7])
def test_a_mixture_checkpoint_resumes_on_another_topology(
    before: tuple[int, str], after: tuple[int, str], step: int
) -> None:
    """The checkpoint is one global position and the weight history: any number and kind
    of workers resumes it, exactly."""
    expected = list(make_mixture())
    loader = mixture_loader(*before, batch_size=3)
    epoch = iter(loader)
    head = [x for batch in itertools.islice(epoch, step) for x in batch]
    state = loader.state_dict()
    del epoch
    resumed = mixture_loader(*after, batch_size=3)
    resumed.load_state_dict(state)
    assert head + flat(resumed) == expected


def _oracle_with_change(step: int, ahead: int, batch_size: int) -> list[str]:
    """The mixture read directly, its weights changed at the position the loader promises:
    the first batch no worker had been asked for (``ahead`` tasks in flight)."""
    mixture = make_mixture("all_exhausted")
    mixture.set_weights(NEW_WEIGHTS, position=(step + ahead) * batch_size)
    return list(mixture)


NEW_WEIGHTS = {"letters": 0.1, "squares": 0.1, "pipe": 0.8}


@many_workers
@pytest.mark.parametrize(
    ("num_workers", "worker_type"), [(0, "process"), (2, "process"), (3, "thread")]
)
@pytest.mark.parametrize("step", [1, 6])
def test_set_weights_between_steps_reaches_the_workers(
    num_workers: int, worker_type: str, step: int
) -> None:
    """set_weights in the main process applies from the first batch not yet requested
    (prefetch_factor * num_workers batches ahead with workers, the next batch without):
    the output is the directly read mixture's with that change, and a checkpoint taken
    after it resumes exactly on another topology (the history is in it)."""
    ahead = 2 * num_workers  # prefetch_factor=2
    loader = mixture_loader(num_workers, worker_type, stop_on="all_exhausted")
    mixture: Any = loader.dataset
    epoch = iter(loader)
    head = [x for batch in itertools.islice(epoch, step) for x in batch]
    mixture.set_weights(NEW_WEIGHTS)
    middle = [x for batch in itertools.islice(epoch, 3) for x in batch]
    state = loader.state_dict()
    rest = [x for batch in epoch for x in batch]
    expected = _oracle_with_change(step, ahead, 4)
    assert head + middle + rest == expected

    resumed = mixture_loader(2, "process", stop_on="all_exhausted")
    resumed.load_state_dict(state)
    assert head + middle + flat(resumed) == expected


@pytest.mark.parametrize(("num_workers", "worker_type"), [(2, "process"), (2, "thread")])
def test_every_window_of_the_loaders_output_keeps_the_weights(
    num_workers: int, worker_type: str
) -> None:
    """+-0.1 %: each source's share in every 1,000 consecutive samples of a 2-worker
    loader's output is its weight (in thousandths) within one sample."""
    weights = {"a": 0.417, "b": 0.333, "c": 0.25}
    sources = {name: list(range(50_000)) for name in weights}
    mixture = Mixture(sources, weights, stop_on="never")
    loader = DataLoader(mixture, batch_size=50, num_workers=num_workers, worker_type=worker_type)
    names = [mixture.source_at(p) for p in range(6_000)]  # the schedule, to name samples
    delivered = list(itertools.islice((x for batch in loader for x in batch), 6_000))
    assert len(delivered) == 6_000
    for start in range(0, 5_001, 250):
        window = names[start : start + 1_000]
        for name, weight in weights.items():
            assert abs(window.count(name) - weight * 1_000) <= 1, (start, name)


def test_torchs_loader_with_several_workers_is_refused() -> None:
    """torch's DataLoader does not split positions: every worker would produce the same
    samples. The mixture refuses rather than duplicate silently."""
    import torch.utils.data as torch_data

    loader = torch_data.DataLoader(make_mixture("never"), batch_size=4, num_workers=2)
    with pytest.raises(RuntimeError, match="num_workers > 1"):
        list(itertools.islice(loader, 3))


@pytest.mark.parametrize(("num_workers", "worker_type"), [(0, "process"), (2, "process")])
def test_a_checkpoint_between_epochs_keeps_the_weights_in_force(
    num_workers: int, worker_type: str
) -> None:
    """The next epoch is a new run from position 0 with the weights set during the last
    one: a job resumed from a checkpoint taken between epochs uses them too, not the
    weights the mixture was built with."""
    loader = mixture_loader(num_workers, worker_type, stop_on="all_exhausted")
    epoch = iter(loader)
    list(itertools.islice(epoch, 2))
    loader.dataset.set_weights(NEW_WEIGHTS)  # type: ignore[attr-defined]
    list(epoch)
    state = loader.state_dict()
    second = flat(loader)

    resumed = mixture_loader(3 - num_workers, "thread", stop_on="all_exhausted")
    resumed.load_state_dict(state)
    assert flat(resumed) == second
    direct = make_mixture("all_exhausted")
    direct.set_weights(NEW_WEIGHTS, position=0)
    assert second == list(direct)
