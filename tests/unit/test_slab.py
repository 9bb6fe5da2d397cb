"""conveyor.transport without processes: slabs, the slab pool, the codec, both ends' protocol.

Slabs live in ``tmp_path`` (a directory stands in for /dev/shm); the worker end and the
main end talk through in-memory lists, so every step of a slab's life is checked in order.
"""

from __future__ import annotations

import dataclasses
import errno
import gc
import os
import pickle
import subprocess
import sys
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch

from conveyor.collate import default_collate, get_output_allocator, set_output_allocator
from conveyor.transport import slab as slab_mod
from conveyor.transport.main_end import SKIP, MainEnd, ShmFallbackWarning
from conveyor.transport.options import SlabOptions
from conveyor.transport.protocol import OVERFLOW, RELEASE
from conveyor.transport.shared import from_shared, to_shared
from conveyor.transport.slab import (
    ShmSpaceError,
    attach_slab,
    create_slab,
    loader_prefix,
    process_prefix,
    reclaim_stale,
    slab_name,
    sweep,
)
from conveyor.transport.slab_pool import BatchArena, SlabPool
from conveyor.transport.worker_end import WorkerEnd, WorkerStop

MIB = 1 << 20


def _config(shm_dir: Path, **kw: Any) -> Any:
    options = SlabOptions(shm_dir=str(shm_dir), **kw)
    return options.resolve(loader_prefix(), num_workers=1, prefetch_factor=2)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# --------------------------------------------------------------------------- slab files
def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_create_attach_share_memory_one_fd_per_mapping(tmp_path: Path) -> None:
    before = _fd_count()
    mapping = create_slab(str(tmp_path), "conveyor-1-x-0-0", MIB)
    other = attach_slab(str(tmp_path / "conveyor-1-x-0-0"))
    # Python's mmap keeps one descriptor per mapping before 3.13 (none after): never more.
    assert _fd_count() - before <= 2
    mapping[10:13] = b"abc"
    assert other[10:13] == b"abc"
    os.unlink(tmp_path / "conveyor-1-x-0-0")
    mapping[0:1] = b"z"  # the mappings outlive the name
    assert other[0:1] == b"z"
    del mapping, other
    assert _fd_count() == before


def test_create_refuses_an_existing_name(tmp_path: Path) -> None:
    (tmp_path / "conveyor-1-x-0-0").write_bytes(b"")
    with pytest.raises(FileExistsError):
        create_slab(str(tmp_path), "conveyor-1-x-0-0", MIB)


def test_create_checks_free_space_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slab_mod, "free_bytes", lambda _: (10 * MIB, 100 * MIB))
    with pytest.raises(ShmSpaceError, match="MiB free"):
        create_slab(str(tmp_path), "conveyor-1-x-0-0", 8 * MIB)
    assert list(tmp_path.iterdir()) == []


def test_fallocate_enospc_is_an_exception_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(ShmSpaceError, match="ran out of space"):
        create_slab(str(tmp_path), "conveyor-1-x-0-0", MIB)
    assert list(tmp_path.iterdir()) == []


def test_sweep_takes_only_its_prefix(tmp_path: Path) -> None:
    for name in ("conveyor-5-aa-0-0", "conveyor-5-aa-1-3", "conveyor-5-bb-0-0", "other"):
        (tmp_path / name).write_bytes(b"")
    assert sweep(str(tmp_path), "conveyor-5-aa-") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conveyor-5-bb-0-0", "other"]


def test_reclaim_stale_removes_only_dead_owners_of_this_namespace(tmp_path: Path) -> None:
    dead = _dead_pid()
    stale = f"{process_prefix(dead)}aa-0-0"
    kept = [
        f"{process_prefix()}bb-0-0",  # alive: this process
        f"conveyor-{dead}-123abc-cc-0-0",  # another PID namespace (docker --ipc=host)
        f"conveyor-{dead}-aa-0-0",  # not our naming: unknown owner
        "conveyor-x",
        "torch_1",
    ]
    for name in [stale, *kept]:
        (tmp_path / name).write_bytes(b"")
    assert reclaim_stale(str(tmp_path)) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)


# ---------------------------------------------------------------------------- slab pool
def test_pool_best_fit_reuse_and_bound(tmp_path: Path) -> None:
    pool = SlabPool(_config(tmp_path, slabs_per_worker=2), worker_id=0)
    a = pool.take(3 * MIB)
    b = pool.take(MIB)
    assert a is not None and b is not None and a.size >= 3 * MIB
    assert pool.take(MIB) is None  # bound of 2 reached, nothing free
    pool.sent([a.id, b.id])
    pool.release([b.id])
    again = pool.take(MIB // 2)
    assert again is b  # reuse, no new file
    pool.release([a.id])  # a was in flight
    bigger = pool.take(8 * MIB)  # a is too small: retired to make room under the bound
    assert bigger is not None and bigger.size >= 8 * MIB
    assert pool.retired == [a.id]
    assert not (tmp_path / a.name).exists()
    pool.close()
    assert list(tmp_path.iterdir()) == []


def test_pool_reports_an_unusable_directory(tmp_path: Path) -> None:
    pool = SlabPool(_config(tmp_path / "missing"), worker_id=0)
    assert pool.take(MIB) is None
    assert pool.scarce is not None and "cannot create a slab" in pool.scarce


def test_pool_budget_and_disabled(tmp_path: Path) -> None:
    pool = SlabPool(_config(tmp_path, max_shm_bytes=2 * MIB), worker_id=0)
    assert pool.take(4 * MIB) is None
    assert pool.scarce is not None and "budget" in pool.scarce
    pool.close()
    off = SlabPool(_config(tmp_path, max_shm_bytes=0), worker_id=0)
    assert off.take(16) is None and off.scarce is None
    assert list(tmp_path.iterdir()) == []


def test_arena_places_locates_and_learns_batch_size(tmp_path: Path) -> None:
    pool = SlabPool(_config(tmp_path), worker_id=0)
    arena = BatchArena(pool, wait=lambda: False)
    arena.begin()
    assert arena.allocate(10, torch.float32) is None  # small: left to the pickle
    big = arena.allocate(300_000, torch.float32)
    assert big is not None and big.dtype == torch.float32 and big.numel() == 300_000
    located = arena.locate(big.data_ptr(), big.numel() * 4)
    assert located is not None and located[1] == 0
    assert arena.locate(big.data_ptr() + 10, big.numel() * 4) is None  # runs past the batch
    second = arena.place(2 * MIB)  # does not fit the first slab: a second one
    assert second is not None and second[0].id != located[0]
    sent = arena.finish({located[0]})
    assert sent == [located[0]] and pool.in_flight == 1
    arena.begin()
    first = arena.place(16)
    assert first is not None and first[0].size >= arena.high_water_bytes  # sized from history
    pool.close()


def test_arena_waits_while_slabs_are_in_flight(tmp_path: Path) -> None:
    pool = SlabPool(_config(tmp_path, slabs_per_worker=1), worker_id=0)
    arena = BatchArena(pool, wait=lambda: False)
    arena.begin()
    slab_id = arena.place(MIB)[0].id  # type: ignore[index]
    arena.finish({slab_id})
    calls: list[int] = []

    def wait() -> bool:
        calls.append(1)
        pool.release([slab_id])  # as if the main process had answered
        return True

    arena = BatchArena(pool, wait=wait)
    arena.begin()
    placed = arena.place(MIB)
    assert placed is not None and placed[0].id == slab_id and calls == [1]
    arena.finish(set())
    pool.close()


# ---------------------------------------------------------------------------------- codec
class Point(NamedTuple):
    x: Any
    y: Any


@dataclasses.dataclass
class Record:
    image: torch.Tensor
    meta: dict[str, Any]


class Holder:
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, payload: Any):
        self.payload = payload

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Holder) and _equal(self.payload, other.payload)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and type(a) is type(b)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.requires_grad == b.requires_grad
            and bool(torch.equal(a.detach(), b.detach()))
        )
    if isinstance(a, np.ndarray):
        return (
            type(b) is np.ndarray
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b)
        )
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(
            _equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    return bool(a == b)


def _sample_structure() -> Any:
    big = torch.arange(100_000, dtype=torch.float32).reshape(100, 1000)
    return {
        "big": big,
        "transposed": big.t(),
        "small": torch.tensor([1, 2, 3]),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.empty(0, 3, dtype=torch.int16),
        "grad": torch.ones(3, requires_grad=True),
        "bf16": torch.arange(20_000).to(torch.bfloat16),
        "bool": torch.arange(10_000) % 3 == 0,
        "complex": torch.randn(5000, dtype=torch.complex64),
        "list": [torch.full((4096,), 7, dtype=torch.uint8), "text", 3],
        "tuple": (np.arange(50_000, dtype=np.int64), np.float32(1.5)),
        "point": Point(torch.zeros(2, 2000), np.arange(12, dtype=">i4").reshape(3, 4)),
        "record": Record(torch.randint(0, 255, (3, 64, 64), dtype=torch.uint8), {"k": b"v"}),
        "holder": Holder([torch.linspace(0, 1, 8000)]),
        "ordered": OrderedDict(a=torch.ones(1), b=np.ones((300, 300))[::2, ::3]),
        "default": defaultdict(list, {"x": [1]}),
        "deque": deque([1, 2]),
        "none": None,
    }


def _resolver(pool: SlabPool) -> Any:
    return lambda slab_id: pool.get(slab_id).array


@pytest.mark.parametrize("with_arena", [True, False])
def test_codec_roundtrip_every_structure(tmp_path: Path, with_arena: bool) -> None:
    pool = SlabPool(_config(tmp_path), worker_id=0)
    arena = BatchArena(pool, wait=lambda: False) if with_arena else None
    if arena is not None:
        arena.begin()
    original = _sample_structure()
    data, referenced = to_shared(original, arena, inline_max_bytes=4096)
    assert bool(referenced) == with_arena
    assert len(data) < (200_000 if with_arena else 10**7)  # big data is not in the pickle
    decoded = from_shared(data, _resolver(pool))
    assert _equal(decoded, original)
    assert decoded["grad"].requires_grad and decoded["grad"].is_leaf
    decoded["big"][0, 0] = -1  # writable
    pool.close()


def test_codec_references_collated_data_without_copying(tmp_path: Path) -> None:
    pool = SlabPool(_config(tmp_path), worker_id=0)
    arena = BatchArena(pool, wait=lambda: False)
    arena.begin()
    previous = set_output_allocator(arena.allocate)
    try:
        batch = default_collate([torch.full((3, 100, 100), i, dtype=torch.uint8) for i in range(8)])
    finally:
        set_output_allocator(previous)
    slab = pool.get(0)
    assert slab.address <= batch.data_ptr() < slab.address + slab.size
    cursor = slab.cursor
    views = {"x": batch, "rows": batch[2:5], "perm": batch.permute(0, 2, 3, 1)}
    views["np"] = views["perm"].numpy()
    data, referenced = to_shared(views, arena, 4096)
    assert slab.cursor == cursor  # nothing copied
    assert referenced == {slab.id}
    decoded = from_shared(data, _resolver(pool))
    for key in ("x", "rows", "perm"):
        assert torch.equal(decoded[key], views[key])
        assert decoded[key].stride() == views[key].stride()
    assert np.array_equal(decoded["np"], views["np"])
    assert decoded["np"].strides == views["np"].strides
    pool.close()


# -------------------------------------------------------------------- both ends, in memory
class Wire:
    """A worker end and a main end joined by lists instead of pipes."""

    def __init__(self, tmp_path: Path, **options: Any):
        self.config = _config(tmp_path, **options)
        self.to_worker: deque[Any] = deque()
        self.frames: deque[bytes] = deque()
        self.main = MainEnd(self.config, lambda _worker, m: self.to_worker.append(m))
        self.on_empty: Any = None
        self.worker = WorkerEnd(self.config, 0, self._receive, self.frames.append)
        self._previous = set_output_allocator(self.worker.allocate)  # as the engine does

    def _receive(self) -> Any:
        if not self.to_worker and self.on_empty is not None:
            self.on_empty()
        return self.to_worker.popleft()

    def produce(self, make: Callable[[], Any]) -> None:
        self.to_worker.append((0, 0, None))  # a TASK starts a batch, then collate runs
        assert self.worker.receive() == (0, 0, None)
        self.worker.send((0, 0, make()))

    def deliver(self) -> Any:
        while True:
            message = self.main.decode(0, self.frames.popleft())
            if message is not SKIP:
                return message[2]

    def close(self) -> None:
        set_output_allocator(self._previous)
        self.worker.close()
        self.main.close()


@pytest.fixture
def make_wire(tmp_path: Path) -> Iterator[Callable[..., Wire]]:
    wires: list[Wire] = []

    def make(**options: Any) -> Wire:
        wires.append(Wire(tmp_path, **options))
        return wires[-1]

    yield make
    for wire in wires:
        wire.close()
    assert get_output_allocator() is None


def _image_batch(i: int) -> Callable[[], torch.Tensor]:
    return lambda: default_collate([torch.full((3, 64, 64), i, dtype=torch.uint8)] * 16)


def test_wire_slab_lifecycle_release_and_reuse(
    tmp_path: Path, make_wire: Callable[..., Wire]
) -> None:
    wire = make_wire()
    assert get_output_allocator() is not None
    wire.produce(_image_batch(1))
    first = wire.deliver()
    assert int(first[5, 0, 0, 0]) == 1
    assert list(tmp_path.iterdir()) == []  # mapped, then unlinked by the main end
    address = first.data_ptr()
    del first
    gc.collect()
    wire.main.before_wait()  # the release goes back to the worker
    assert wire.to_worker and wire.to_worker[0][0] == RELEASE
    wire.produce(_image_batch(2))  # the worker reads the release, then the task
    second = wire.deliver()
    assert second.data_ptr() == address and int(second[0, 0, 0, 0]) == 2  # same slab reused
    assert wire.main.mapped_slabs == 1


def test_wire_kept_batches_are_never_overwritten(make_wire: Callable[..., Wire]) -> None:
    wire = make_wire(slabs_per_worker=2)

    def answer_stalls() -> None:  # what a pool's receive does with stall frames
        while wire.frames:
            assert wire.main.decode(0, wire.frames.popleft()) is SKIP

    wire.on_empty = answer_stalls
    kept = []
    for i in range(6):
        wire.produce(_image_batch(i))
        kept.append(wire.deliver())
    # two in slabs, then the bound forces stalls; the main end answers each stall with
    # OVERFLOW (nothing was released), so later batches travel pickled
    assert [int(b[0, 0, 0, 0]) for b in kept] == list(range(6))
    assert wire.main.mapped_slabs == 2


def test_wire_stall_is_answered_by_release_first(make_wire: Callable[..., Wire]) -> None:
    wire = make_wire(slabs_per_worker=1)
    wire.produce(_image_batch(0))
    held = [wire.deliver()]

    def main_side() -> None:  # the user drops the batch, then the main end sees the stall
        held.clear()
        gc.collect()
        assert wire.main.decode(0, wire.frames.popleft()) is SKIP
        assert [m[0] for m in wire.to_worker] == [RELEASE, OVERFLOW]

    wire.on_empty = main_side
    wire.produce(_image_batch(1))
    batch = wire.deliver()
    assert int(batch[0, 0, 0, 0]) == 1 and wire.main.mapped_slabs == 1  # reused, not pickled
    assert [m[0] for m in wire.to_worker] == [OVERFLOW]  # stale answer, ignored later
    wire.to_worker.append(None)
    assert wire.worker.receive() is None


def test_wire_stop_while_stalled_raises_worker_stop(make_wire: Callable[..., Wire]) -> None:
    wire = make_wire(slabs_per_worker=1)
    wire.produce(_image_batch(0))
    held = wire.deliver()
    wire.on_empty = lambda: wire.to_worker.append(None)
    wire.to_worker.append((0, 1, None))
    wire.worker.receive()
    with pytest.raises(WorkerStop):
        _image_batch(1)()  # collate asks for a slab; the worker is told to stop meanwhile
    assert wire.worker.receive() is None
    del held


def test_wire_scarce_memory_warns_once_and_falls_back(make_wire: Callable[..., Wire]) -> None:
    wire = make_wire(max_shm_bytes=MIB // 8)  # less than one 192 KiB batch
    with pytest.warns(ShmFallbackWarning, match="--shm-size") as caught:
        wire.produce(_image_batch(3))
        batch = wire.deliver()
    assert int(batch[0, 0, 0, 0]) == 3 and wire.main.mapped_slabs == 0
    warning = caught[0].message
    assert isinstance(warning, ShmFallbackWarning) and f"({warning.note})" in str(warning)
    copied = pickle.loads(pickle.dumps(warning))  # the test's own data, not a checkpoint's
    assert (copied.note, str(copied)) == (warning.note, str(warning))
    wire.produce(_image_batch(4))
    assert int(wire.deliver()[0, 0, 0, 0]) == 4  # no second warning (filterwarnings=error)


def test_main_end_close_sweeps_unattached_slabs(tmp_path: Path) -> None:
    config = _config(tmp_path)
    main = MainEnd(config, lambda _w, _m: None)
    (tmp_path / slab_name(config.prefix, 0, 7)).write_bytes(b"")  # made, never announced
    main.close()
    assert list(tmp_path.iterdir()) == []
