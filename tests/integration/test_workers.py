"""Multi-worker semantics with real processes and threads."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import psutil
import pytest
import torch

import conveyor
from conveyor import DataLoader

from sample_datasets import (
    BlockAt,
    DieAt,
    FailAt,
    Range,
    ShardedStream,
    Unsharded,
    WorkerStamp,
)

KINDS = ["process", "thread"]


def _flat(batches: list[Any]) -> list[int]:
    return [int(x) for b in batches for x in (b if isinstance(b, torch.Tensor) else [b])]


@pytest.mark.parametrize("worker_type", KINDS)
@pytest.mark.parametrize("num_workers", [1, 2])
@pytest.mark.parametrize("in_order", [True, False])
def test_every_sample_once(worker_type: str, num_workers: int, in_order: bool) -> None:
    loader = DataLoader(
        Range(50), batch_size=4, num_workers=num_workers, worker_type=worker_type, in_order=in_order
    )
    got = _flat(list(loader))
    if in_order:
        assert got == list(range(50))
    else:
        assert sorted(got) == list(range(50))


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_start_methods(context: str) -> None:
    loader = DataLoader(Range(10), batch_size=3, num_workers=2, multiprocessing_context=context)
    assert _flat(list(loader)) == list(range(10))


def test_context_object_is_accepted() -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    loader = DataLoader(Range(6), batch_size=2, num_workers=1, multiprocessing_context=ctx)
    assert _flat(list(loader)) == list(range(6))


def test_in_order_false_does_not_wait_for_a_slow_batch() -> None:
    release = threading.Event()
    loader = DataLoader(
        BlockAt(12, bad=0, event=release),
        batch_size=2,
        num_workers=2,
        worker_type="thread",
        in_order=False,
    )
    it = iter(loader)
    first = next(it)  # batch 0 is blocked: something else must come first
    assert int(first[0]) != 0
    release.set()
    rest = [first, *it]
    assert sorted(_flat(rest)) == list(range(12))


@pytest.mark.parametrize("worker_type", KINDS)
def test_get_worker_info_in_workers(worker_type: str) -> None:
    assert conveyor.get_worker_info() is None
    loader = DataLoader(
        WorkerStamp(8, conveyor.get_worker_info),
        batch_size=None,
        num_workers=2,
        worker_type=worker_type,
        generator=torch.Generator().manual_seed(11),
    )
    stamps = list(loader)
    assert [s["worker"] for s in stamps] == [0, 1] * 4  # round-robin dispatch
    assert {s["num_workers"] for s in stamps} == {2}
    seeds = {s["worker"]: s["seed"] for s in stamps}
    assert seeds[1] == seeds[0] + 1
    if worker_type == "process":
        assert len({s["pid"] for s in stamps}) == 2


@pytest.mark.parametrize("worker_type", KINDS)
def test_torchs_get_worker_info_sees_each_worker(worker_type: str) -> None:
    """Code that asks torch (Hugging Face datasets does) sees the worker it runs in."""
    import torch.utils.data as tud

    stamps = list(
        DataLoader(
            WorkerStamp(8, lambda: tud.get_worker_info()),  # noqa: PLW0108 - looked up late
            batch_size=None,
            num_workers=2,
            worker_type=worker_type,
        )
    )
    assert [s["worker"] for s in stamps] == [0, 1] * 4
    assert {s["num_workers"] for s in stamps} == {2}
    assert tud.get_worker_info() is None  # the main thread is no worker


def _record_init(worker_id: int) -> None:
    info = conveyor.get_worker_info()
    assert info is not None and info.id == worker_id
    info.dataset.offset = worker_id * 1000  # the per-replica set-up pattern of torch's docs


class InitRecorder(Range):
    offset = -1

    def __getitem__(self, i: int) -> int:
        return self.offset + i


@pytest.mark.parametrize("worker_type", KINDS)
def test_worker_init_fn_runs_first(worker_type: str) -> None:
    loader = DataLoader(
        InitRecorder(4),
        batch_size=None,
        num_workers=2,
        worker_init_fn=_record_init,
        worker_type=worker_type,
    )
    assert list(loader) == [0, 1001, 2, 1003]


@pytest.mark.parametrize("worker_type", KINDS)
@pytest.mark.parametrize("exc_type", [ValueError, KeyError, IndexError])
def test_worker_exception_reraised_with_type_and_traceback(
    worker_type: str, exc_type: type[Exception]
) -> None:
    loader = DataLoader(
        FailAt(10, bad=5, exc_type=exc_type), batch_size=2, num_workers=2, worker_type=worker_type
    )
    it = iter(loader)
    assert _flat([next(it), next(it)]) == [0, 1, 2, 3]
    with pytest.raises(exc_type) as info:
        next(it)
    text = str(info.value)
    assert f"in DataLoader worker {worker_type} 0" in text
    assert "bad sample 5" in text and "__getitem__" in text
    # the iterator goes on after the failed batch, and the loader is usable again
    assert _flat(list(it)) == [6, 7, 8, 9]
    with pytest.raises(exc_type):
        list(loader)


def _bad_init(worker_id: int) -> None:
    raise RuntimeError(f"init failed in {worker_id}")


@pytest.mark.parametrize("worker_type", KINDS)
def test_worker_init_fn_error_is_raised(worker_type: str) -> None:
    loader = DataLoader(Range(4), num_workers=2, worker_init_fn=_bad_init, worker_type=worker_type)
    with pytest.raises(RuntimeError, match="init failed in"):
        list(loader)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSEGV", "exit"])
def test_dead_worker_raises_promptly(how: str) -> None:
    loader = DataLoader(DieAt(20, bad=6, how=how), batch_size=2, num_workers=2)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker 1\b") as info:
        list(loader)
    assert time.monotonic() - start < 5
    message = str(info.value)
    expected = {"SIGKILL": "signal 9 (SIGKILL)", "SIGSEGV": "signal 11 (SIGSEGV)", "exit": "code 7"}
    assert expected[how] in message
    # torch's first sentence (what its tests and users match), then conveyor's detail,
    # each fact once (the pid, the signal, "worker" said twice at most)
    torch_says = {"SIGKILL": "Killed", "SIGSEGV": "Segmentation fault"}.get(how)
    if torch_says is not None:
        first = rf"^DataLoader worker \(pid \d+\) is killed by signal: {torch_says}\. "
        assert re.match(first, message)
        assert re.search(r"It was worker 1, ended by signal \d+ \(SIG[A-Z]+\)", message)
    else:
        assert re.match(
            r"^DataLoader worker 1 \(pid \d+\) exited unexpectedly with code 7\.$", message
        )
    pid = re.search(r"pid (\d+)", message)
    assert pid is not None and message.count(pid.group(1)) == 1
    assert message.count("signal 9") <= 1 and message.count("DataLoader worker") == 1


def test_timeout_raises() -> None:
    loader = DataLoader(BlockAt(4, bad=1), batch_size=None, num_workers=1, timeout=0.5)
    it = iter(loader)
    assert next(it) == 0
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"^DataLoader timed out after 0.5 seconds$"):
        next(it)
    assert 0.4 < time.monotonic() - start < 3
    del it


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_stopped_worker_times_out_on_time(context: str) -> None:
    """A worker stopped by SIGSTOP (as a debugger or an operator would) is reported when the
    timeout runs out, not a polite second or two later: a stuck worker is terminated at
    once (SIGTERM, then SIGCONT so that a stopped one acts on it), and nothing leaks."""
    timeout = 1.5
    loader = DataLoader(
        DieAt(6, bad=2, how="SIGSTOP"),
        batch_size=None,
        num_workers=1,
        timeout=timeout,
        multiprocessing_context=context,
    )
    it = iter(loader)
    assert [next(it), next(it)] == [0, 1]
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"^DataLoader timed out after 1.5 seconds$"):
        next(it)
    elapsed = time.monotonic() - start
    assert timeout - 0.05 <= elapsed < timeout + 0.5, elapsed
    assert all(worker.exitcode is not None for worker in it._workers)
    del it


@pytest.mark.parametrize("worker_type", KINDS)
def test_persistent_workers_survive_epochs(worker_type: str) -> None:
    loader = DataLoader(
        WorkerStamp(6, conveyor.get_worker_info),
        batch_size=None,
        num_workers=2,
        persistent_workers=True,
        worker_type=worker_type,
    )
    first = list(loader)
    second = list(loader)
    assert [s["index"] for s in first] == [s["index"] for s in second] == list(range(6))
    if worker_type == "process":
        assert {s["pid"] for s in first} == {s["pid"] for s in second}
    # an epoch abandoned half-way does not leak stale batches into the next
    it = iter(loader)
    next(it)
    assert [s["index"] for s in loader] == list(range(6))


def test_persistent_workers_see_sampler_changes() -> None:
    sampler = conveyor.DistributedSampler(Range(8), num_replicas=2, rank=0, shuffle=True, seed=3)
    loader = DataLoader(Range(8), sampler=sampler, num_workers=2, persistent_workers=True)
    epochs = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        epochs.append(_flat(list(loader)))
    assert epochs[0] != epochs[1] or epochs[1] != epochs[2]
    assert all(len(e) == 4 for e in epochs)


@pytest.mark.parametrize("worker_type", KINDS)
@pytest.mark.parametrize("persistent", [False, True])
def test_iterable_per_worker_end_and_drop_last(worker_type: str, persistent: bool) -> None:
    # worker 0: 0,2,..,10 (6 items); worker 1: 1,3,..,9 (5 items)
    dataset = ShardedStream(0, 11, uneven=True, get_worker_info=conveyor.get_worker_info)
    loader = DataLoader(
        dataset,
        batch_size=4,
        drop_last=True,
        num_workers=2,
        worker_type=worker_type,
        persistent_workers=persistent,
    )
    for _ in range(2):
        batches = [b.tolist() for b in loader]
        assert batches == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_unsharded_iterable_duplicates_and_warns_like_torch() -> None:
    loader = DataLoader(Unsharded(3), batch_size=None, num_workers=2)
    assert len(loader) == 3
    with pytest.warns(UserWarning, match="was reported to be 3"):
        got = _flat(list(loader))
    assert sorted(got) == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("worker_type", KINDS)
def test_early_break_many_times_leaves_nothing(worker_type: str) -> None:
    me = psutil.Process()
    fds = me.num_fds()
    for _ in range(20):
        for i, _batch in enumerate(
            DataLoader(Range(100), batch_size=2, num_workers=2, worker_type=worker_type)
        ):
            if i == 3:
                break
    assert me.num_fds() <= fds + 2
    # the leak guard checks children, threads and /dev/shm after the test


def test_several_loaders_at_once_in_threads() -> None:
    results: dict[int, list[int]] = {}

    def run(k: int) -> None:
        results[k] = _flat(list(DataLoader(Range(30), batch_size=3, num_workers=2)))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == {k: list(range(30)) for k in range(3)}
    # interleaved iteration of two loaders in one thread
    a = iter(DataLoader(Range(10), num_workers=2))
    b = iter(DataLoader(Range(10), num_workers=2, worker_type="thread"))
    assert [(int(x), int(y)) for x, y in zip(a, b, strict=True)] == [(i, i) for i in range(10)]


class Mutable(Range):
    """Map-style dataset whose items depend on an attribute changed between epochs."""

    offset = 0

    def __getitem__(self, i: int) -> int:
        return self.offset + i


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_zygote_epochs_see_dataset_changes_and_fresh_workers(context: str) -> None:
    dataset = Mutable(4)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context=context)
    assert list(loader) == [0, 1, 2, 3]
    dataset.offset = 100  # torch re-pickles the dataset every epoch: so must we
    assert list(loader) == [100, 101, 102, 103]
    stamps = DataLoader(
        WorkerStamp(4, conveyor.get_worker_info),
        batch_size=None,
        num_workers=2,
        multiprocessing_context=context,
    )
    first = {s["pid"] for s in stamps}
    second = {s["pid"] for s in stamps}
    assert len(first) == len(second) == 2 and first.isdisjoint(second)


def test_zygote_worker_death_is_reported() -> None:
    loader = DataLoader(
        DieAt(20, bad=6, how="SIGKILL"),
        batch_size=2,
        num_workers=2,
        multiprocessing_context="spawn",
    )
    with pytest.raises(RuntimeError, match=r"is killed by signal.*worker 1, .*SIGKILL"):
        list(loader)
    # the loader (and its zygote) still works for the next epoch
    with pytest.raises(RuntimeError, match="is killed by signal"):
        list(loader)


class PrivateDraws(Range):
    """Draws from the worker's private generators (race-free in thread workers)."""

    def __getitem__(self, i: int) -> tuple[float, float, float]:
        info = conveyor.get_worker_info()
        assert info is not None and info.rng is not None
        rng = info.rng
        return rng.random.random(), float(torch.rand((), generator=rng.torch)), rng.numpy.random()


@pytest.mark.parametrize("worker_type", KINDS)
def test_private_worker_generators_are_reproducible_and_distinct(worker_type: str) -> None:
    def draws() -> list[Any]:
        loader = DataLoader(
            PrivateDraws(8),
            batch_size=None,
            num_workers=2,
            worker_type=worker_type,
            generator=torch.Generator().manual_seed(21),
        )
        return list(loader)

    first, second = draws(), draws()
    assert first == second  # same loader seed, same draws, threads or not
    assert first[0] != first[1]  # workers 0 and 1 draw different streams


def test_a_worker_traceback_has_one_header() -> None:
    """torch's "Original Traceback (most recent call last):", not a second header after it."""
    with pytest.raises(ValueError) as caught:
        list(DataLoader(FailAt(8, bad=3), batch_size=None, num_workers=1))
    text = str(caught.value)
    assert "Original Traceback (most recent call last):" in text
    assert text.count("Traceback (most recent call last)") == 1


def test_a_generator_that_is_no_generator_is_refused_at_once() -> None:
    with pytest.raises(TypeError, match=r"generator must be a torch\.Generator"):
        DataLoader(Range(10), shuffle=True, generator=1)  # type: ignore[arg-type]


class _TorchNamesOfWorkerInfo:
    """Reads what torch 2.13's `WorkerInfo` offers: ``worker_method`` and ``rng``'s names."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> tuple[str, int, float]:
        info = conveyor.get_worker_info()
        assert info is not None and info.rng is not None
        rng = info.rng
        draw = int(torch.randint(0, 10**6, (1,), generator=rng.torch_generator))
        assert rng.random_generator is rng.random and rng.numpy_generator is rng.numpy
        return info.worker_method, draw, rng.random_generator.random()


@pytest.mark.parametrize(
    ("worker_type", "method"),
    [("process", "multiprocessing"), ("thread", "thread")],
)
def test_worker_info_answers_to_torchs_names(worker_type: str, method: str) -> None:
    import dataclasses

    from torch.utils.data._utils.worker import WorkerInfo as TorchWorkerInfo

    ours = [f.name for f in dataclasses.fields(conveyor.WorkerInfo)]
    theirs = [f.name for f in dataclasses.fields(TorchWorkerInfo)]
    assert ours[:5] == theirs[:5]  # positional construction means the same
    loader = DataLoader(
        _TorchNamesOfWorkerInfo(),
        batch_size=None,
        num_workers=2,
        worker_method="multiprocessing" if worker_type == "process" else worker_type,
    )
    assert loader.worker_type == worker_type
    rows = list(loader)
    assert {row[0] for row in rows} == {method}
    assert rows[0][1:] != rows[1][1:]  # each worker draws from its own generators
