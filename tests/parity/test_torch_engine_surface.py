"""Engine behaviours torch's own tests check, compared with torch.utils.data on the same input:
the iterator's private surface (`_workers`, `_shutdown_workers`, `_pin_memory_thread`), the
timeout message, and nested tensors crossing from workers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.utils.data as tud

import conveyor

JOIN_TIMEOUT_S = 30.0


class _Range(conveyor.Dataset[int]):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


class _Blocking(conveyor.Dataset[int]):
    """Index 0 never returns (until the worker is ended): the loader must time out."""

    def __init__(self) -> None:
        self.never = threading.Event()

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        if index == 0:
            self.never.wait()
        return index


class _Nested(conveyor.Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> torch.Tensor:
        parts = [torch.arange(index + 1, dtype=torch.float32), torch.ones(2) * index]
        return torch.nested.nested_tensor(parts)


def _both(dataset: Any, **kwargs: Any) -> tuple[Any, Any]:
    return conveyor.DataLoader(dataset, **kwargs), tud.DataLoader(dataset, **kwargs)


@pytest.mark.parametrize("persistent_workers", [False, True])
def test_workers_views_outlive_the_iterator_as_torchs_do(persistent_workers: bool) -> None:
    ours = conveyor.DataLoader(
        _Range(40), batch_size=2, num_workers=2, persistent_workers=persistent_workers
    )
    theirs = tud.DataLoader(_Range(40), batch_size=2, num_workers=2)  # the oracle, as a rule
    for loader in (ours, theirs):
        iterator = iter(loader)
        workers = iterator._workers  # type: ignore[attr-defined]
        assert len(workers) == 2
        assert all(isinstance(w.pid, int) and w.is_alive() for w in workers)
        assert next(iterator).tolist() == [0, 1]
        iterator._shutdown_workers()  # type: ignore[attr-defined]
        for worker in workers:
            worker.join(JOIN_TIMEOUT_S)
            assert not worker.is_alive()
            assert worker.exitcode == 0
        del iterator


def test_workers_end_when_a_partly_read_iterator_is_dropped() -> None:
    ours, theirs = _both(_Range(40), batch_size=2, num_workers=2)
    assert iter(ours)._pin_memory_thread is None  # type: ignore[attr-defined]
    for loader in (ours, theirs):
        iterator = iter(loader)
        workers = iterator._workers  # type: ignore[attr-defined]
        for i, _ in enumerate(iterator):
            if i == 3:
                break
        del iterator
        for worker in workers:
            worker.join(JOIN_TIMEOUT_S)
            assert not worker.is_alive()


@pytest.mark.parametrize("persistent_workers", [False, True])
def test_timeout_message_is_torchs_with_the_users_value(persistent_workers: bool) -> None:
    dataset = _Blocking()
    loader = conveyor.DataLoader(
        dataset, batch_size=2, num_workers=1, timeout=1, persistent_workers=persistent_workers
    )
    iterator = iter(loader)
    with pytest.raises(RuntimeError, match=r"^DataLoader timed out after 1 seconds$"):
        next(iterator)
    # the stuck worker was ended with the error, not left for the interpreter's exit
    assert all(not w.is_alive() for w in iterator._workers)  # type: ignore[attr-defined]


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_nested_tensors_cross_from_workers_as_with_torch(context: str) -> None:
    kwargs: dict[str, Any] = dict(batch_size=None, num_workers=2, multiprocessing_context=context)
    ours, theirs = _both(_Nested(), **kwargs)
    got, expected = list(ours), list(theirs)
    assert len(got) == len(expected) == 6
    for a, b in zip(got, expected, strict=True):
        assert a.is_nested
        for x, y in zip(a.unbind(), b.unbind(), strict=True):
            assert torch.equal(x, y)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_state_dict_after_break_resumes_where_the_loop_was_left(num_workers: int) -> None:
    """A trainer that stops at max_steps and checkpoints: the rest of the epoch is torch's
    uninterrupted epoch from the step after the break, nothing re-read, nothing lost."""
    dataset = tud.TensorDataset(torch.arange(30))
    expected = [
        b[0].tolist()
        for b in tud.DataLoader(
            dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7)
        )
    ]
    loader = conveyor.DataLoader(
        dataset,
        batch_size=4,
        shuffle=True,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(7),
    )
    for step, _ in enumerate(loader):
        if step == 2:
            break
    state = loader.state_dict()
    resumed = conveyor.DataLoader(
        dataset,
        batch_size=4,
        shuffle=True,
        num_workers=num_workers,
        generator=torch.Generator(),
    )
    resumed.load_state_dict(state)
    assert [b[0].tolist() for b in resumed] == expected[3:]


class _Straggler(conveyor.Dataset[tuple[int, int]]):
    """Index 0 waits until the main process has seen ``release_after`` other items."""

    def __init__(self, n: int, release: Any):
        self.n = n
        self.release = release

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[int, int]:
        info = conveyor.get_worker_info() or tud.get_worker_info()
        if index == 0:
            assert self.release.wait(60), "the main process never released the straggler"
        return (-1 if info is None else info.id, index)


def test_out_of_order_does_not_feed_a_straggler_as_torch() -> None:
    """torch's ready-first rule: a worker holding its share of the task budget gets no more,
    so the fast worker takes every other index and the straggler's two come last."""
    context = torch.multiprocessing.get_context("fork")
    outputs = []
    for make in (tud.DataLoader, conveyor.DataLoader):
        release = context.Event()
        loader = make(
            _Straggler(10, release),
            batch_size=None,
            num_workers=2,
            prefetch_factor=2,
            in_order=False,
            timeout=20,
            multiprocessing_context=context,
        )
        got = []
        for worker_id, index in loader:
            got.append((int(worker_id), int(index)))
            if len(got) == 8:
                release.set()
        outputs.append(got)
    torch_got, ours = outputs
    assert torch_got == [(1, i) for i in (1, 3, 4, 5, 6, 7, 8, 9)] + [(0, 0), (0, 2)]
    assert ours == torch_got


class _Counted(conveyor.Dataset[int]):
    """Holds multiprocessing objects, which only a spawning Process may pickle."""

    def __init__(self, context: Any):
        self.calls = context.Value("i", 0)
        self.lock = context.Lock()

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> int:
        with self.lock:
            self.calls.value += 1
        return index


@pytest.fixture(scope="module")
def _multiprocessing_heap() -> Iterator[Any]:
    """multiprocessing keeps one shared heap (an mmap'd file) per process for good: open it
    before the leak guard takes its baseline."""
    keep = torch.multiprocessing.get_context("spawn").Value("i", 0)
    yield keep


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_dataset_with_multiprocessing_value_and_lock_as_with_torch(
    method: str, _multiprocessing_heap: Any
) -> None:
    context = torch.multiprocessing.get_context(method)
    results = []
    for make in (tud.DataLoader, conveyor.DataLoader):
        dataset = _Counted(context)
        loader = make(dataset, batch_size=2, num_workers=2, multiprocessing_context=context)
        results.append(([b.tolist() for b in loader], dataset.calls.value))
    assert results[1] == results[0] == ([[0, 1], [2, 3], [4, 5]], 6)


class _Unpicklable(conveyor.Dataset[int]):
    def __init__(self) -> None:
        self.transform = lambda x: x  # a lambda: 'spawn' cannot pickle it

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return int(self.transform(index))


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_unpicklable_dataset_warns_and_raises_as_torch(method: str) -> None:
    raised = []
    for make in (tud.DataLoader, conveyor.DataLoader):
        loader = make(_Unpicklable(), num_workers=1, multiprocessing_context=method)
        with (
            pytest.warns(UserWarning, match="^Got pickle error when attempting to start a worker"),
            pytest.raises(Exception) as info,
        ):
            list(loader)
        raised.append((type(info.value), str(info.value)))
    assert raised[1] == raised[0]
