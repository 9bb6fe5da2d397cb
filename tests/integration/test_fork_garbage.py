"""Forked workers never finalize the main process's garbage.

A worker forked while the main process holds unreachable cycles inherits them; if its
collector frees them, their finalizers run in the worker. With a Ray handle among them that
call deadlocked workers and aborted Ray's driver (engine/workers/forking.py). torch's workers do
run them: the same test on torch's DataLoader is the proof that the test can fail.
"""

from __future__ import annotations

import gc
import os
import struct
from collections.abc import Iterator
from typing import Any

import pytest
import torch.utils.data as tud

import conveyor

from sample_datasets import Range

_PID = struct.Struct("i")


class Witness:
    """Cyclic garbage whose finalizer reports the pid it ran in."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.cycle = self

    def __del__(self) -> None:
        os.write(self.fd, _PID.pack(os.getpid()))


def _collect_in_worker(worker_id: int) -> None:
    gc.collect()


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    os.set_blocking(read, False)
    yield read, write
    os.close(read)
    os.close(write)


def _old_garbage(fd: int) -> None:
    """A Witness cycle made unreachable in the oldest generation: only a full collection,
    which building a loader does not trigger, frees it before the workers fork."""
    witness: Any = Witness(fd)
    gc.collect()
    del witness


def _finalized_in(read: int) -> list[int]:
    try:
        data = os.read(read, 4096)
    except BlockingIOError:
        return []
    return [pid for (pid,) in _PID.iter_unpack(data)]


@pytest.mark.parametrize("loader_class", [conveyor.DataLoader, tud.DataLoader])
def test_workers_do_not_finalize_inherited_garbage(
    pipe: tuple[int, int], loader_class: Any
) -> None:
    read, write = pipe
    if not gc.isenabled():
        pytest.skip("the collector is off")
    _old_garbage(write)
    loader = loader_class(Range(8), batch_size=2, num_workers=2, worker_init_fn=_collect_in_worker)
    assert sorted(int(x) for batch in loader for x in batch) == list(range(8))
    in_workers = _finalized_in(read)
    assert os.getpid() not in in_workers  # still garbage here when the workers forked
    gc.collect()
    in_parent = _finalized_in(read)
    if loader_class is tud.DataLoader:  # torch: each worker ran the finalizer (the hazard)
        assert len(in_workers) == 2 and in_parent == [os.getpid()]
    else:
        assert in_workers == [] and in_parent == [os.getpid()]


def test_garbage_made_after_the_users_own_freeze_is_not_finalized_in_workers(
    pipe: tuple[int, int],
) -> None:
    """The user froze the heap (the doctor's gc.freeze() advice), then made garbage: the
    workers must not finalize it either (a CUDA event freed in a forked worker aborts it)."""
    read, write = pipe
    if not gc.isenabled():
        pytest.skip("the collector is off")
    gc.collect()
    gc.freeze()
    try:
        _old_garbage(write)
        loader = conveyor.DataLoader(
            Range(8), batch_size=2, num_workers=2, worker_init_fn=_collect_in_worker
        )
        assert sorted(int(x) for batch in loader for x in batch) == list(range(8))
        assert _finalized_in(read) == []
    finally:
        gc.unfreeze()
    gc.collect()
    assert _finalized_in(read) == [os.getpid()]


def test_the_users_own_frozen_objects_stay_frozen() -> None:
    """A user who froze the heap (``gc.freeze``, the copy-on-write trick) keeps it frozen."""
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        loader = conveyor.DataLoader(Range(4), batch_size=2, num_workers=2)
        assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
        # still frozen (gc.unfreeze() would empty the permanent generation); a frozen object
        # may still die by reference counting (a module global replaced), so not all
        assert frozen > 0 and gc.get_freeze_count() >= frozen * 0.99
    finally:
        gc.unfreeze()
