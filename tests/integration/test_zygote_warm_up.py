"""spawn/forkserver loaders start their zygote when the loader is built, not at ``iter()``:
its interpreter imports torch while the user builds the model (S4)."""

from __future__ import annotations

import gc
from typing import Any

import psutil
import pytest

import conveyor

from sample_datasets import Range


def _new_children(before: set[int]) -> list[psutil.Process]:
    """New processes of this tree (a forkserver zygote is the fork server's child)."""
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in before]


def _before() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_the_zygote_starts_with_the_loader_and_serves_its_first_epoch(context: str) -> None:
    before = _before()
    loader = conveyor.DataLoader(
        Range(8), batch_size=2, num_workers=2, multiprocessing_context=context
    )
    started = _new_children(before)
    assert len(started) == 1  # the zygote, before any iter()
    zygote = started[0]
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert zygote in _new_children(before) and zygote.is_running()  # with its workers gone
    del loader
    gc.collect()
    zygote.wait(timeout=10)


def test_a_fork_or_thread_loader_starts_nothing_when_built() -> None:
    before = _before()
    loaders: list[Any] = [
        conveyor.DataLoader(Range(4), num_workers=2, multiprocessing_context="fork"),
        conveyor.DataLoader(Range(4), num_workers=2, worker_type="thread"),
        conveyor.DataLoader(Range(4), multiprocessing_context=None),
    ]
    assert _new_children(before) == []
    assert [len(list(loader)) for loader in loaders] == [4, 4, 4]


def test_changing_the_start_method_starts_a_new_zygote_and_spares_live_workers() -> None:
    """A persistent iterator keeps its spawn workers (as torch's keeps its own) when the
    start method changes; the old zygote ends with the loader."""
    before = _before()
    loader = conveyor.DataLoader(
        Range(6), batch_size=3, num_workers=2, multiprocessing_context="spawn"
    )
    (spawned,) = _new_children(before)
    first = iter(loader)
    head = next(first).tolist()
    loader.multiprocessing_context = "forkserver"
    started = [p for p in _new_children(before) if p.pid != spawned.pid]
    assert any(p.ppid() != spawned.pid for p in started)  # a forkserver zygote
    assert [head, *(b.tolist() for b in first)] == [[0, 1, 2], [3, 4, 5]]
    assert [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5]]
    assert spawned.is_running()
    del first, loader
    gc.collect()
    spawned.wait(timeout=10)


def _worker_environment(worker_id: int) -> None:
    import os

    assert os.environ.get("CONVEYOR_TEST_SET_LATE") == "after construction"
    assert os.getcwd() == os.environ["CONVEYOR_TEST_CWD"]


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_workers_see_the_environment_as_of_iter_not_of_construction(
    context: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch starts spawn workers at ``iter()``: what was set after the loader was built
    reaches them. The zygote started earlier must hand it on all the same."""
    loader = conveyor.DataLoader(
        Range(4),
        batch_size=2,
        num_workers=2,
        multiprocessing_context=context,
        worker_init_fn=_worker_environment,
    )
    monkeypatch.setenv("CONVEYOR_TEST_SET_LATE", "after construction")
    monkeypatch.setenv("CONVEYOR_TEST_CWD", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
