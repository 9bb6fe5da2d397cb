"""conveyor.DataLoader against torch.utils.data.DataLoader on the same inputs."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import conveyor

from sample_datasets import RandomDraws, Range, SelfIterating, ShardedStream, WithGetitems


def _plain(x: Any) -> Any:
    """Tensors to nested lists (with dtype) so results compare with ==."""
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), x.tolist())
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    return x


def _both(dataset: Any, **kwargs: Any) -> tuple[list[Any], list[Any]]:
    seed = kwargs.pop("seed", None)
    out = []
    for module in (tud, conveyor):
        if seed is not None:
            kwargs["generator"] = torch.Generator().manual_seed(seed)
        out.append([_plain(b) for b in module.DataLoader(dataset, **kwargs)])
    return out[0], out[1]


BATCHING = [(None, False)] + [(b, d) for b in (1, 3, 10, 11) for d in (False, True)]


@pytest.mark.parametrize(("batch_size", "drop_last"), BATCHING)
@pytest.mark.parametrize("shuffle", [False, True])
def test_map_style_batches_match(batch_size: int | None, drop_last: bool, shuffle: bool) -> None:
    theirs, ours = _both(
        Range(10), batch_size=batch_size, drop_last=drop_last, shuffle=shuffle, seed=7
    )
    assert ours == theirs


@pytest.mark.parametrize("num_workers", [0, 2])
def test_global_seed_drives_the_same_shuffles(num_workers: int) -> None:
    """Without a generator both draw from torch's global RNG in the same order."""
    results = []
    for module in (tud, conveyor):
        torch.manual_seed(1234)
        loader = module.DataLoader(Range(20), batch_size=4, shuffle=True, num_workers=num_workers)
        results.append([[_plain(b) for b in loader] for _ in range(3)])
    assert results[0] == results[1]
    assert results[0][0] != results[0][1]  # epochs differ


@pytest.mark.parametrize("worker_type", ["process", "thread"])
@pytest.mark.parametrize("num_workers", [1, 2])
def test_multi_worker_matches_torch(worker_type: str, num_workers: int) -> None:
    kwargs: dict[str, Any] = {"batch_size": 3, "shuffle": True, "num_workers": num_workers}
    theirs = [_plain(b) for b in tud.DataLoader(Range(17), generator=_gen(3), **kwargs)]
    ours = conveyor.DataLoader(Range(17), generator=_gen(3), worker_type=worker_type, **kwargs)
    assert [_plain(b) for b in ours] == theirs


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_worker_rng_seeding_matches_torch() -> None:
    """random, torch and NumPy draws inside process workers equal torch's for one seed."""
    kwargs: dict[str, Any] = {"batch_size": 2, "num_workers": 2}
    theirs = [_plain(b) for b in tud.DataLoader(RandomDraws(8), generator=_gen(5), **kwargs)]
    ours = [_plain(b) for b in conveyor.DataLoader(RandomDraws(8), generator=_gen(5), **kwargs)]
    assert ours == theirs
    # and the four batches really are random (not all equal)
    assert len({str(b[1]) for b in ours}) == 4


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
@pytest.mark.parametrize(
    ("batch_size", "drop_last"), [(None, False), (1, False), (4, False), (4, True)]
)
def test_iterable_style_matches_torch(
    num_workers: int, batch_size: int | None, drop_last: bool
) -> None:
    dataset = ShardedStream(0, 23, uneven=True)
    kwargs: dict[str, Any] = {
        "batch_size": batch_size,
        "drop_last": drop_last,
        "num_workers": num_workers,
    }
    if num_workers > 2:
        # More workers than CPUs here: both loaders warn the same way.
        with pytest.warns(UserWarning, match="worker processes in total"):
            theirs, ours = _both(dataset, **kwargs)
    else:
        theirs, ours = _both(dataset, **kwargs)
    assert ours == theirs


@pytest.mark.parametrize(
    ("num_workers", "worker_type"), [(0, "process"), (2, "process"), (2, "thread")]
)
@pytest.mark.parametrize(("batch_size", "drop_last"), [(None, False), (2, False), (3, True)])
def test_dataset_that_is_its_own_iterator_ends_like_torch(
    num_workers: int, worker_type: str, batch_size: int | None, drop_last: bool
) -> None:
    """``__iter__`` returning self (and rewinding) is called once per epoch, not per batch."""
    kwargs: dict[str, Any] = {"batch_size": batch_size, "drop_last": drop_last}
    theirs = [
        _plain(b) for b in tud.DataLoader(SelfIterating(10), num_workers=num_workers, **kwargs)
    ]
    ours = [
        _plain(b)
        for b in conveyor.DataLoader(
            SelfIterating(10), num_workers=num_workers, worker_type=worker_type, **kwargs
        )
    ]
    assert ours == theirs
    assert len(theirs) == {None: 10, 2: 5, 3: 3}[batch_size] * max(1, num_workers)


def test_getitems_is_used_for_batches() -> None:
    theirs, ours = _both(WithGetitems(7), batch_size=3, collate_fn=list)
    assert ours == theirs
    assert ours[0][0] == ("batched", 0)


def test_custom_sampler_and_batch_sampler() -> None:
    sampler = [5, 3, 1, 0]
    assert (
        _both(Range(6), sampler=sampler, batch_size=2)[1]
        == _both(Range(6), sampler=sampler, batch_size=2)[0]
    )
    batches = [[0, 1, 2], [5], [3, 4]]
    theirs, ours = _both(Range(6), batch_sampler=batches)
    assert ours == theirs


def test_structures_collate_like_torch() -> None:
    data = [{"x": np.full((2,), i, dtype=np.float32), "y": (i, f"s{i}")} for i in range(5)]
    theirs, ours = _both(data, batch_size=2)
    assert ours == theirs


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"num_workers": -1}, ValueError),
        ({"timeout": -1}, ValueError),
        ({"prefetch_factor": 2}, ValueError),
        ({"num_workers": 1, "prefetch_factor": -1}, ValueError),
        ({"persistent_workers": True}, ValueError),
        ({"sampler": [0, 1], "shuffle": True}, ValueError),
        ({"batch_sampler": [[0]], "batch_size": 2}, ValueError),
        ({"batch_sampler": [[0]], "shuffle": True}, ValueError),
        ({"batch_sampler": [[0]], "drop_last": True}, ValueError),
        ({"batch_size": None, "drop_last": True}, ValueError),
        ({"multiprocessing_context": "fork"}, ValueError),
        ({"num_workers": 1, "multiprocessing_context": "nonsense"}, ValueError),
        ({"num_workers": 1, "multiprocessing_context": 3}, TypeError),
    ],
)
def test_invalid_arguments_raise_like_torch(kwargs: dict[str, Any], exc: type[Exception]) -> None:
    with pytest.raises(exc) as theirs:
        tud.DataLoader(Range(4), **kwargs)
    with pytest.raises(exc) as ours:
        conveyor.DataLoader(Range(4), **kwargs)
    first_words = str(theirs.value).split()[:2]
    assert str(ours.value).split()[:2] == first_words


@pytest.mark.parametrize("kwargs", [{"shuffle": True}, {"sampler": [0]}, {"batch_sampler": [[0]]}])
def test_iterable_dataset_rejects_samplers_like_torch(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="IterableDataset"):
        tud.DataLoader(ShardedStream(0, 3), **kwargs)
    with pytest.raises(ValueError, match="IterableDataset"):
        conveyor.DataLoader(ShardedStream(0, 3), **kwargs)


@pytest.mark.parametrize("attr", ["batch_size", "sampler", "dataset", "drop_last"])
def test_attributes_are_frozen_after_init(attr: str) -> None:
    loader = conveyor.DataLoader(Range(4))
    with pytest.raises(ValueError, match=f"{attr} attribute should not be set"):
        setattr(loader, attr, None)


@pytest.mark.parametrize(
    ("dataset", "kwargs"),
    [
        (Range(10), {"batch_size": 3}),
        (Range(10), {"batch_size": 3, "drop_last": True}),
        (Range(10), {"batch_size": None}),
        (ShardedStream(0, 10), {"batch_size": 3}),
        (ShardedStream(0, 10), {"batch_size": 3, "drop_last": True}),
        (ShardedStream(0, 10), {"batch_size": None}),
    ],
)
def test_len_matches_torch(dataset: Any, kwargs: dict[str, Any]) -> None:
    assert len(conveyor.DataLoader(dataset, **kwargs)) == len(tud.DataLoader(dataset, **kwargs))


def test_len_warning_when_iterable_exceeds_reported_length() -> None:
    class Liar(conveyor.IterableDataset[int]):
        def __len__(self) -> int:
            return 2

        def __iter__(self) -> Any:
            return iter(range(5))

    loader = conveyor.DataLoader(Liar(), batch_size=None)
    assert len(loader) == 2
    with pytest.warns(UserWarning, match="was reported to be 2"):
        assert list(loader) == list(range(5))


def test_random_module_state_is_untouched_by_single_process_loading() -> None:
    random.seed(0)
    expected = random.random()
    random.seed(0)
    list(conveyor.DataLoader(Range(5), shuffle=True))
    assert random.random() == expected


MISMATCHED_BATCHES = {
    "type": [torch.zeros(2), 1],
    "type-array": [torch.zeros(2), np.zeros(2)],
    "size": [torch.zeros(2), torch.zeros(3)],
}


def _first_batch_error(module: Any, items: list[Any], num_workers: int) -> BaseException:
    iterator = iter(module.DataLoader(items, batch_size=len(items), num_workers=num_workers))
    try:
        next(iterator)
    except Exception as error:  # compared with torch's by the caller
        error.__traceback__ = None  # frames would keep the iterator (and its workers) alive
        return error
    finally:
        for name in ("_shutdown_workers", "close"):  # torch's, conveyor's
            if hasattr(iterator, name):
                getattr(iterator, name)()
    raise AssertionError("the batch collated")


@pytest.mark.parametrize("num_workers", [0, 2], ids=["nw0", "nw2"])
@pytest.mark.parametrize("name", list(MISMATCHED_BATCHES))
def test_collate_mismatch_raises_like_torch(name: str, num_workers: int) -> None:
    """Elements that do not stack: torch's exception and message (collating into the loader's
    output buffers must not turn it into another error). torch's own workers raise an
    AttributeError for "type" (its shared-memory path calls ``numel()`` on the int), so
    the reference is torch's single-process error."""
    items = MISMATCHED_BATCHES[name]
    theirs = _first_batch_error(tud, items, 0)
    ours = _first_batch_error(conveyor, items, num_workers)
    assert type(ours) is type(theirs)
    assert str(theirs).strip().splitlines()[-1] in str(ours)
