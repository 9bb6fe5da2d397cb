"""The shared-memory slab transport with real worker processes (and the pin-memory thread).

Zero-copy views, values for every structure, use-after-release safety, slab reuse, file
descriptor limits, /dev/shm hygiene when workers or the main process are killed, scarce
shared memory. Synchronisation is by pipes and process exits, never by sleeping.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import psutil
import pytest
import torch

from conveyor import DataLoader
from conveyor.collate import default_collate
from conveyor.engine.loop import base_iterator
from conveyor.engine.workers.pin_thread import PinningPool
from conveyor.transport.main_end import ShmFallbackWarning
from conveyor.transport.options import ENV_SHM_DIR, ENV_SHM_MAX_BYTES, ENV_SLABS_PER_WORKER
from conveyor.transport.pinning import NO_ACCELERATOR_WARNING

SHM = "/dev/shm"
MY_PREFIX = f"conveyor-{os.getpid()}-"
IMG = (3, 64, 64)


def _our_entries(prefix: str = MY_PREFIX) -> list[str]:
    return sorted(name for name in os.listdir(SHM) if name.startswith(prefix))


def _slab_mappings() -> dict[str, tuple[int, int]]:
    """Slab mappings of this process: path -> (start, end) address."""
    found = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "/conveyor-" in line:
                span, *_, path = line.split(maxsplit=5)
                start, end = (int(x, 16) for x in span.split("-"))
                found[path.strip()] = (start, end)
    return found


class Images:
    """Item i: a uint8 image filled with i % 251, a label, a float array."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "image": torch.full(IMG, i % 251, dtype=torch.uint8),
            "label": i,
            "array": np.full((32, 32), i, dtype=np.float32),
        }


def _check_images(batch: dict[str, Any], first: int) -> None:
    n = len(batch["label"])
    assert batch["label"].tolist() == list(range(first, first + n))
    expected = torch.arange(first, first + n) % 251
    assert torch.equal(batch["image"].reshape(n, -1).amin(1).long(), expected)
    assert torch.equal(batch["image"].reshape(n, -1).amax(1).long(), expected)
    assert torch.equal(batch["array"][:, 5, 7], torch.arange(first, first + n).float())


def test_batches_are_zero_copy_views_of_slabs() -> None:
    loader = DataLoader(Images(64), batch_size=8, num_workers=2)
    for k, batch in enumerate(loader):
        _check_images(batch, 8 * k)
        spans = _slab_mappings().values()
        for key in ("image", "array"):
            ptr = batch[key].data_ptr()
            assert any(start <= ptr < end for start, end in spans), key
        assert batch["image"].untyped_storage().nbytes() == batch["image"].nbytes
    assert _our_entries() == []  # every slab file was unlinked once mapped


class Pair(NamedTuple):
    left: Any
    right: Any


@dataclasses.dataclass
class Sample:
    pixels: torch.Tensor
    name: str


class Box:
    """A custom batch type holding tensors in attributes."""

    def __init__(self, items: list[Any]):
        self.items = items


def _custom_collate(samples: list[Any]) -> Any:
    stacked = default_collate([s[0] for s in samples])
    return {
        "stacked": stacked,
        "pair": Pair(stacked.float() / 2, [s[1] for s in samples]),
        "sample": Sample(stacked[0].clone(), "first"),
        "box": Box([np.stack([s[2] for s in samples]), torch.tensor(3), b"raw"]),
        "ordered": OrderedDict(t=tuple(s[3] for s in samples)),
        "grad": torch.ones(2, requires_grad=True),
        "strided": stacked.permute(0, 2, 3, 1),
    }


class Mixed:
    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> Any:
        return (
            torch.full((2, 40, 40), i, dtype=torch.int32),
            f"s{i}",
            np.full((1000,), i, dtype=np.float64),
            torch.tensor([i, -i], dtype=torch.int16),
        )


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        assert a.requires_grad == b.requires_grad and a.stride() == b.stride()
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif dataclasses.is_dataclass(a) or isinstance(a, Box):
        _same(vars(a), vars(b))
    else:
        assert a == b


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_every_structure_matches_in_process_loading(context: str) -> None:
    kwargs: dict[str, Any] = {"batch_size": 4, "collate_fn": _custom_collate}
    expected = list(DataLoader(Mixed(), **kwargs))
    got = list(DataLoader(Mixed(), num_workers=2, multiprocessing_context=context, **kwargs))
    assert len(got) == len(expected) == 10
    for a, b in zip(got, expected, strict=True):
        _same(a, b)


def test_kept_batches_are_never_overwritten() -> None:
    loader = DataLoader(Images(400), batch_size=8, num_workers=2)
    kept = []
    for k, batch in enumerate(loader):
        if k < 10:
            kept.append((k, batch))  # ten batches stay alive while 40 more are made
        for first, old in kept:
            _check_images(old, 8 * first)
    assert len(kept) == 10


def test_list_of_all_batches_with_one_slab_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backpressure never hangs: at the bound, batches the user keeps go through the pipe."""
    monkeypatch.setenv(ENV_SLABS_PER_WORKER, "1")
    batches = list(DataLoader(Images(120), batch_size=6, num_workers=2))
    assert len(_slab_mappings()) <= 2  # one slab per worker; the other 18 batches were piped
    for k, batch in enumerate(batches):
        _check_images(batch, 6 * k)


@pytest.mark.parametrize("persistent", [False, True])
def test_slabs_are_reused_not_multiplied(persistent: bool) -> None:
    loader = DataLoader(Images(8 * 120), batch_size=8, num_workers=2, persistent_workers=persistent)
    seen_maps: set[str] = set()
    most_files = 0
    count = 0
    for _epoch in range(2):
        for k, batch in enumerate(loader):
            _check_images(batch, 8 * k)
            seen_maps.update(_slab_mappings())
            most_files = max(most_files, len(_our_entries()))
            count += 1
            if k == 100:
                break  # abandon the rest of the epoch: outstanding slabs must come back
    assert count == 2 * 101  # over 200 batches
    bound = 2 * (2 + 3)  # per pool: workers x (prefetch_factor + 3)
    pools = 1 if persistent else 2
    # slabs are sized to the batch: a worker's first batch, of a size not known yet, may
    # need one slab more, retired once the size is learnt (one per worker, never more)
    assert len(seen_maps) <= pools * (bound + 2)
    assert most_files <= bound


def _run_script(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_fd_limit_1024_with_thousands_of_tensors_per_batch() -> None:
    result = _run_script(
        """
        import os, resource, torch
        from conveyor import DataLoader
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

        class Many:
            def __len__(self): return 64
            def __getitem__(self, i):
                return {"big": [torch.full((1024,), i, dtype=torch.float32)] * 2000,
                        "tiny": [torch.tensor(i)] * 2000}

        loader = DataLoader(Many(), batch_size=4, num_workers=2)
        for k, batch in enumerate(loader):
            assert len(batch["big"]) == 2000 and len(batch["tiny"]) == 2000
            assert batch["big"][1999][3, 1000].item() == 4 * k + 3
            assert batch["tiny"][7].tolist() == list(range(4 * k, 4 * k + 4))
        print("fds", len(os.listdir("/proc/self/fd")), "batches", k + 1)
        """
    )
    assert result.returncode == 0, result.stderr
    fds, batches = re.findall(r"\d+", result.stdout)
    assert int(batches) == 16 and int(fds) < 100


class KillInCollate:
    """Collating batch ``bad`` stacks into a slab, then the worker kills itself."""

    def __init__(self, bad: int):
        self.bad = bad

    def __call__(self, samples: list[Any]) -> Any:
        batch = default_collate(samples)
        if int(batch["label"][0]) == self.bad:
            os.kill(os.getpid(), signal.SIGKILL)
        return batch


def test_killed_worker_leaves_no_shared_memory() -> None:
    loader = DataLoader(Images(200), batch_size=8, num_workers=2, collate_fn=KillInCollate(80))
    with pytest.raises(RuntimeError, match=r"is killed by signal: Killed\. .*signal 9 \(SIGKILL\)"):
        for _ in loader:
            pass
    assert _our_entries() == []


_ORPHAN_SCRIPT = """
import os, sys, threading, torch
from conveyor import DataLoader
from conveyor.collate import default_collate

def stuck_collate(samples):
    if int(samples[0][0, 0]) < 16:
        return default_collate(samples)
    batch = default_collate(samples * 80)  # 2.6 MB: no 1 MiB slab fits, a new unmapped one
    print("STUCK", flush=True)
    threading.Event().wait()

class Data:
    def __len__(self): return 64
    def __getitem__(self, i): return torch.full((64, 64), i, dtype=torch.uint8)

it = iter(DataLoader(Data(), batch_size=8, num_workers=1, collate_fn=stuck_collate))
next(it); next(it)
next(it)
"""


def test_sigkilled_main_process_segments_are_reclaimed_at_next_start() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "STUCK"  # the worker holds a fresh slab
        tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        os.killpg(proc.pid, signal.SIGKILL)  # main process and worker, no clean-up at all
        proc.wait(timeout=30)
        psutil.wait_procs([psutil.Process(p) for p in tree if psutil.pid_exists(p)], timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    orphan_prefix = f"conveyor-{proc.pid}-"
    assert _our_entries(orphan_prefix), "the killed run should have left a slab behind"
    batch = next(iter(DataLoader(Images(8), batch_size=8, num_workers=1)))
    _check_images(batch, 0)
    assert _our_entries(orphan_prefix) == []


def test_a_worker_whose_main_process_dies_unlinks_its_slabs() -> None:
    """Only the main process is killed (SIGKILL: no clean-up of its own); its worker, told
    by the kernel, unlinks the slab it was filling before it exits."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "STUCK"  # the worker holds a fresh slab
        workers = psutil.Process(proc.pid).children(recursive=True)
        orphan_prefix = f"conveyor-{proc.pid}-"
        assert _our_entries(orphan_prefix), "the worker should hold a slab by now"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, "the worker outlived its main process"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert _our_entries(orphan_prefix) == []


def test_scarce_budget_falls_back_to_the_pipe_with_a_clear_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_SHM_MAX_BYTES, str(1 << 20))  # 0.5 MiB per worker: no slab fits
    loader = DataLoader(Images(64), batch_size=16, num_workers=2)
    with pytest.warns(ShmFallbackWarning, match="--shm-size"):
        batches = list(loader)
    for k, batch in enumerate(batches):
        _check_images(batch, 16 * k)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Any:
    """A real 8 MiB tmpfs, or skip when this process may not mount one."""
    mount_point = tmp_path / "shm"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_small_real_tmpfs_never_bus_errors(
    small_tmpfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SHM_DIR, str(small_tmpfs))
    # 4 MiB batches (256 images and arrays) need 5 MiB slabs: one fits, the other worker's
    # slab cannot, and its batches must travel through the pipe.
    loader = DataLoader(Images(256 * 8), batch_size=256, num_workers=2)
    with pytest.warns(ShmFallbackWarning):
        batches = list(loader)
    assert len(batches) == 8
    for k, batch in enumerate(batches):
        _check_images(batch, 256 * k)
    del batches
    assert [p for p in small_tmpfs.iterdir() if p.name.startswith("conveyor-")] == []


def test_thread_workers_pass_batches_by_reference() -> None:
    shared = torch.arange(10)

    class Same:
        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int) -> torch.Tensor:
            return shared

    for item in DataLoader(Same(), batch_size=None, num_workers=2, worker_type="thread"):
        assert item is shared


# ------------------------------------------------------------------------- pin memory
def test_pin_memory_without_accelerator_warns_and_loads() -> None:
    with pytest.warns(UserWarning, match=re.escape(NO_ACCELERATOR_WARNING)):
        it = iter(DataLoader(Images(16), batch_size=8, num_workers=1, pin_memory=True))
    assert not isinstance(it._pool, PinningPool)  # type: ignore[attr-defined]
    for k, batch in enumerate(it):
        _check_images(batch, 8 * k)


class _Pinned(dict):  # type: ignore[type-arg]
    """What the fake pin function returns: a copy, marked, made in the pin thread."""

    thread = ""


def _fake_pin(data: Any, device: Any = None) -> Any:
    pinned = _Pinned({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in data.items()})
    pinned.thread = threading.current_thread().name
    return pinned


def test_pin_thread_pins_every_batch_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base_iterator, "pin_memory_available", lambda device="": True)
    monkeypatch.setattr(base_iterator, "pin_memory", _fake_pin)
    loader = DataLoader(Images(48), batch_size=8, num_workers=2, pin_memory=True)
    it = iter(loader)
    pool = it._pool  # type: ignore[attr-defined]
    assert isinstance(pool, PinningPool)
    batches = list(it)
    assert len(batches) == 6
    for k, batch in enumerate(batches):
        assert isinstance(batch, _Pinned) and batch.thread == "conveyor-pin-memory"
        _check_images(batch, 8 * k)
    assert not pool.thread.is_alive()  # the epoch ended: the thread was joined


def test_pin_thread_is_idle_when_blocked_and_stops_on_del(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(base_iterator, "pin_memory_available", lambda device="": True)
    monkeypatch.setattr(base_iterator, "pin_memory", _fake_pin)
    loader = DataLoader(Images(48), batch_size=8, num_workers=1, pin_memory=True)
    it = iter(loader)
    next(it)
    pool = it._pool  # type: ignore[attr-defined]
    thread = pool.thread

    def cpu_s() -> float:
        for t in psutil.Process().threads():
            if t.id == thread.native_id:
                return float(t.user_time + t.system_time)
        raise AssertionError("pin thread not found")

    before = cpu_s()
    threading.Event().wait(0.5)  # measuring idleness, not synchronising
    assert cpu_s() - before < 0.05  # blocked in a wait, not polling
    del it
    assert not thread.is_alive()


def test_thread_workers_pin_in_the_loop_not_in_a_pin_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(base_iterator, "pin_memory_available", lambda device="": True)
    monkeypatch.setattr(base_iterator, "pin_memory", _fake_pin)
    loader = DataLoader(Images(16), batch_size=4, num_workers=2, worker_type="thread")
    loader.pin_memory = True
    it = iter(loader)
    assert not isinstance(it._pool, PinningPool)  # type: ignore[attr-defined]
    for k, batch in enumerate(it):
        assert isinstance(batch, _Pinned) and batch.thread == threading.main_thread().name
        _check_images(batch, 4 * k)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_nested_tensors_cross_from_workers(context: str) -> None:
    from sample_datasets import Nested

    loader = DataLoader(Nested(), batch_size=None, num_workers=2, multiprocessing_context=context)
    for i, sample in enumerate(loader):
        assert sample.is_nested
        first, second = sample.unbind()
        assert first.shape == (1, 3) and second.shape == (i + 2, 3)
        assert bool((second == float(i)).all())
