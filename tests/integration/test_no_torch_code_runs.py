"""No function of torch.utils.data runs while conveyor builds a loader and loads an epoch.

conveyor's classes subclass torch's (for isinstance), so a method left un-overridden, a
``super()`` call or a torch helper would silently run torch's code. A profile hook records
every Python call whose code lives under ``torch/utils/data`` — in the main process, in
every thread started meanwhile (thread workers), and in worker processes (inherited across
fork, and installed again by ``worker_init_fn`` for other start methods). Worker processes
report by appending to a file, so a worker's calls are seen even after its last batch.

A user's *torch* DataPipe graph is the user's dataset: iterating it runs its pipes' own
code (``torch/utils/data/datapipes/``), as a user Dataset's ``__getitem__`` would. The graph
walk, the shuffle switch, the seeds and the sharding are conveyor's own: with such a graph
no call may land anywhere else in ``torch.utils.data`` (its loader, ``graph``,
``graph_settings``, ``_utils``), and the pipes' methods conveyor calls are only
``set_shuffle``, ``set_seed`` and ``apply_sharding`` (see the last test).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch

import conveyor

TORCH_DATA_DIR = str(Path(torch.__file__).parent / "utils" / "data") + os.sep


class _Recorder:
    """A profile function that appends ``pid file:function`` for calls into torch.utils.data."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(TORCH_DATA_DIR):
            code = frame.f_code
            with open(self.path, "a") as out:
                out.write(
                    f"{os.getpid()} {code.co_filename}:{code.co_firstlineno} {code.co_name}\n"
                )


def _install_in_worker(path: str, worker_id: int) -> None:
    sys.setprofile(_Recorder(path))


class _Squares(conveyor.Dataset[torch.Tensor]):
    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, index * index])

    def __len__(self) -> int:
        return 24


class _SplitStream(conveyor.IterableDataset[torch.Tensor]):
    """Each worker yields every ``num_workers``-th sample, as the docs recommend."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = conveyor.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return (torch.tensor([i, i * i]) for i in range(start, 24, step))


def _epoch(dataset: Any, worker_type: str, record: str, shuffle: bool | None = None) -> list[int]:
    recorder = _Recorder(record)
    # torch's own DataLoader (used as the oracle by other tests in this process) leaves a
    # process-wide SIGCHLD handler behind, which would run when conveyor's workers exit; a
    # process that only uses conveyor never has it.
    previous_sigchld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    threading.setprofile(recorder)
    sys.setprofile(recorder)
    try:
        if not isinstance(dataset, torch.utils.data.IterableDataset):
            shuffle = True
        loader = conveyor.DataLoader(
            dataset,
            batch_size=4,
            shuffle=shuffle,
            num_workers=2,
            worker_type=worker_type,
            worker_init_fn=functools.partial(_install_in_worker, record),
            generator=torch.Generator().manual_seed(0),
        )
        seen = [int(value) for batch in loader for value in batch.flatten()[::2]]
        del loader
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        signal.signal(signal.SIGCHLD, previous_sigchld)
    return seen


@pytest.mark.parametrize("worker_type", ["process", "thread"])
@pytest.mark.parametrize("style", ["map", "iterable"])
def test_epoch_runs_no_torch_data_code(tmp_path: Path, worker_type: str, style: str) -> None:
    record = tmp_path / "torch-calls.txt"
    record.touch()
    dataset = _Squares() if style == "map" else _SplitStream()
    seen = _epoch(dataset, worker_type, str(record))
    assert sorted(seen) == list(range(24))
    calls = record.read_text()
    assert calls == "", f"torch.utils.data code ran:\n{calls}"


class _AsksTorch(_Squares):
    """Calls torch's default_convert() in the worker: the recorder must see it there."""

    def __getitem__(self, index: int) -> torch.Tensor:
        import torch.utils.data as tud

        tud.default_convert(index)
        return super().__getitem__(index)


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_the_recorder_sees_torch_code_in_workers(tmp_path: Path, worker_type: str) -> None:
    """The check above can fail: a call into torch from a worker is recorded, with its pid."""
    record = tmp_path / "torch-calls.txt"
    record.touch()
    _epoch(_AsksTorch(), worker_type, str(record))
    pids = {int(line.split()[0]) for line in record.read_text().splitlines()}
    assert "default_convert" in record.read_text()
    assert (pids != {os.getpid()}) == (worker_type == "process")


def test_the_recorder_sees_torchs_loader(tmp_path: Path) -> None:
    import torch.utils.data as tud

    record = tmp_path / "torch-calls.txt"
    record.touch()
    sys.setprofile(_Recorder(str(record)))
    try:
        list(tud.DataLoader(list(range(4)), batch_size=2))
    finally:
        sys.setprofile(None)
    assert "dataloader.py" in record.read_text()


def _torch_graph() -> Any:
    from torch.utils.data.datapipes.iter import IterableWrapper

    return IterableWrapper(range(24)).shuffle().sharding_filter().map(_pair)


def _pair(i: int) -> torch.Tensor:
    return torch.tensor([i, i * i])


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_a_torch_datapipe_graph_runs_only_its_own_pipes_code(
    tmp_path: Path, worker_type: str
) -> None:
    record = tmp_path / "torch-calls.txt"
    record.touch()
    seen = _epoch(_torch_graph(), worker_type, str(record), shuffle=True)
    assert sorted(seen) == list(range(24))  # sharded across the workers: once each
    calls = record.read_text().splitlines()
    datapipes_dir = TORCH_DATA_DIR + "datapipes" + os.sep
    outside = [line for line in calls if not line.split()[1].startswith(datapipes_dir)]
    assert outside == [], "torch.utils.data code outside the user's DataPipes ran:\n" + "\n".join(
        outside
    )
    called = {line.rsplit(" ", 1)[1] for line in calls}
    assert {"set_shuffle", "set_seed", "apply_sharding", "__iter__"} <= called
    assert not called & {"traverse_dps", "apply_random_seed", "get_all_graph_pipes"}
