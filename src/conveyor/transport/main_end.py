"""The main process's end of the slab transport.

`MainEnd` turns frames from workers back into batches whose tensors and arrays view the
slabs, maps each slab once (then unlinks its file: from then on only the mappings keep the
memory), and sends a release for a slab back to its worker once every view of the batch in
it is gone. It owns the loader's slab names: ``close()`` unlinks any that are left (a
worker killed before the main process mapped its slab), and an exit hook does the same for
every loader of the process. Starting a `MainEnd` reclaims slabs of processes that died
without cleaning up.

How a pool uses it, in the thread that receives results::

    end.before_wait()                        # send queued releases
    ready = connection.wait([...pipes, end.wake_fd], timeout)
    interrupted = end.woken(ready)           # True after interrupt()
    message = end.decode(worker_id, outbox.recv_bytes())   # SKIP for a stall frame

Thread safety: ``before_wait``, ``woken`` and ``decode`` from the receiving thread only;
``interrupt`` from any thread; release callbacks run in whichever thread drops a batch's
last view (or in the garbage collector) and only append to a deque and write one byte to
a non-blocking pipe. ``send_control`` (given by the pool) must be safe to call while
another thread sends tasks to the same worker.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import mmap
import os
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from conveyor.transport import protocol
from conveyor.transport.cuda_host import Fence
from conveyor.transport.options import ENV_SHM_MAX_BYTES, SlabConfig
from conveyor.transport.pinned_slabs import PinnedSlabs, SlabRegistration, token_over
from conveyor.transport.shared import from_shared
from conveyor.transport.slab import (
    attach_slab,
    process_prefix,
    reclaim_stale,
    slab_name,
    sweep,
    unlink_quietly,
)

__all__ = ["SKIP", "MainEnd", "ShmFallbackWarning"]

SKIP: Any = object()
"""What `MainEnd.decode` returns for a frame that carried no engine message."""


_FALLBACK_MESSAGE = (
    "conveyor: too little shared memory for DataLoader batches ({note}). Batches now travel "
    "pickled through the worker pipes: slower, but correct. To fix it, give the process more "
    "shared memory (docker run --shm-size=8g, or a larger /dev/shm), or lower num_workers, "
    "batch_size or prefetch_factor; " + ENV_SHM_MAX_BYTES + " caps conveyor's share."
)


class ShmFallbackWarning(UserWarning):
    """Shared memory is too scarce for slabs; batches are pickled through pipes instead.
    ``note`` says why (the worker's words), for the doctor's evidence."""

    def __init__(self, note: str) -> None:
        super().__init__(_FALLBACK_MESSAGE.format(note=note))
        self.note = note

    def __reduce__(self) -> tuple[type[ShmFallbackWarning], tuple[str]]:
        return type(self), (self.note,)


class _Releases:
    """Slabs whose views are all gone, waiting to be sent back; callable from any thread.

    A release may carry a fence (registered slabs): it is sent once the fence is complete.
    Owns the wake-up pipe that makes a blocked receive notice them.
    """

    def __init__(self) -> None:
        self.pending: deque[tuple[int, int, Fence | None]] = deque()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.lock = threading.Lock()
        self.closed = False
        self.interrupted = False

    def __call__(self, worker_id: int, slab_id: int, fence: Fence | None = None) -> None:
        self.pending.append((worker_id, slab_id, fence))
        self.wake()

    def settle(self, worker_id: int) -> None:
        """Wait for the fences of ``worker_id``'s queued releases (it waits for a slab)."""
        for _, _, fence in self._queued(worker_id):
            with contextlib.suppress(Exception):  # a broken device: nothing copies any more
                fence.synchronize()  # type: ignore[union-attr]

    def _queued(self, worker_id: int) -> list[tuple[int, int, Fence | None]]:
        for _ in range(8):  # a finalizer in this thread may append while we copy
            try:
                return [e for e in self.pending if e[0] == worker_id and e[2] is not None]
            except RuntimeError:
                continue
        return []

    def wake(self) -> None:
        # May run inside the garbage collector, in any thread: never block. A lost wake-up
        # only delays a release until the next receive.
        if self.lock.acquire(blocking=False):
            try:
                if not self.closed:
                    with contextlib.suppress(OSError):
                        os.write(self.wake_w, b"\0")
            finally:
                self.lock.release()

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                os.close(self.wake_r)
                os.close(self.wake_w)


class MainEnd:
    """Decoding, slab mappings and releases for one loader's worker processes.

    Args:
        config: The loader's slab settings (the same object its workers get).
        send_control: ``(worker_id, message)`` → sends a transport message on that
            worker's task pipe; must ignore a worker that is gone.
        pinned: Registers slabs as pinned memory as they are first mapped (``pin_memory=True``
            on CUDA); None leaves them pageable.
    """

    def __init__(
        self,
        config: SlabConfig,
        send_control: Callable[[int, Any], None],
        pinned: PinnedSlabs | None = None,
    ):
        self._config = config
        self._send_control = send_control
        self.bytes_received = 0  # pipe frames plus shared-memory views decoded (stats)
        _exit_hook(config.shm_dir)
        reclaim_stale(config.shm_dir)
        # a slab's mapping, or with `pinned` its root array (which alone holds the mapping)
        self._mappings: dict[tuple[int, int], mmap.mmap | np.ndarray[Any, Any]] = {}
        self._pinned = pinned
        self._registrations: dict[tuple[int, int], SlabRegistration | None] = {}
        self._releases = _Releases()
        self._warned = False

    @property
    def config(self) -> SlabConfig:
        return self._config

    @property
    def pinned(self) -> PinnedSlabs | None:
        """The slabs' registrations as pinned memory, if this loader registers them."""
        return self._pinned

    @property
    def wake_fd(self) -> int:
        """Readable when releases are queued or `interrupt` was called; wait on it too."""
        return self._releases.wake_r

    def before_wait(self) -> None:
        """Send every queued release to its worker (call before blocking for results)."""
        for worker_id, slab_ids in self.take_releases().items():
            self._send_control(worker_id, (protocol.RELEASE, slab_ids))

    def woken(self, ready: set[Any]) -> bool:
        """Empty the wake-up pipe if it is in ``ready``; True if `interrupt` was called."""
        releases = self._releases
        if releases.wake_r not in ready:
            return False
        with contextlib.suppress(OSError):
            while os.read(releases.wake_r, 4096):
                pass
        interrupted, releases.interrupted = releases.interrupted, False
        return interrupted

    def interrupt(self) -> None:
        """Make the receiving thread's wait return soon, with `woken` reporting True."""
        releases = self._releases
        with releases.lock:
            releases.interrupted = True
            if not releases.closed:
                with contextlib.suppress(BlockingIOError):  # full: already readable
                    os.write(releases.wake_w, b"\0")

    def decode(self, worker_id: int, frame: bytes) -> Any:
        """The engine message carried by ``frame``, or `SKIP` for a transport-only frame."""
        stream = io.BytesIO(frame)
        retired, note, stall = protocol.read_header(stream)
        for slab_id in retired:
            self._mappings.pop((worker_id, slab_id), None)
            self._registrations.pop((worker_id, slab_id), None)
        if note is not None and not self._warned:
            self._warned = True
            warnings.warn(ShmFallbackWarning(note), stacklevel=2)
        if stall is not None:
            # The worker waits for a slab: send what was released (once copies from it are
            # done), then let it stop waiting.
            self._releases.settle(worker_id)
            self.before_wait()
            self._send_control(worker_id, (protocol.OVERFLOW, stall))
            return SKIP
        tokens: dict[int, np.ndarray[Any, Any]] = {}

        def resolve(slab_id: int) -> np.ndarray[Any, Any]:
            token = tokens.get(slab_id)
            if token is None:
                token = tokens[slab_id] = self._token(worker_id, slab_id)
            return token

        self.bytes_received += len(frame)
        return from_shared(stream, resolve, self._tally)

    def _tally(self, view_bytes: int) -> None:
        self.bytes_received += view_bytes

    def _token(self, worker_id: int, slab_id: int) -> np.ndarray[Any, Any]:
        """A fresh array over the slab for one batch; its death releases the slab."""
        key = (worker_id, slab_id)
        mapping = self._mappings.get(key)
        if mapping is None:
            path = os.path.join(
                self._config.shm_dir, slab_name(self._config.prefix, worker_id, slab_id)
            )
            mapping = attach_slab(path)
            unlink_quietly(path)
            if self._pinned is not None:
                mapping, self._registrations[key] = self._pinned.root(mapping)
            self._mappings[key] = mapping
        if self._pinned is None:
            token = np.frombuffer(mapping, dtype=np.uint8)
            weakref.finalize(token, self._releases, worker_id, slab_id).atexit = False
            return token
        token = token_over(mapping)  # type: ignore[arg-type]
        registration = self._registrations.get(key)
        args = (self._releases, self._pinned, worker_id, slab_id, registration)
        weakref.finalize(token, _fenced_release, *args).atexit = False
        return token

    def take_releases(self) -> dict[int, list[int]]:
        """Released slab ids per worker, each returned once; a release whose fence is not
        complete yet stays queued."""
        released: dict[int, list[int]] = {}
        pending = self._releases.pending
        waiting = []
        for _ in range(len(pending)):
            try:
                entry = pending.popleft()
            except IndexError:
                break
            worker_id, slab_id, fence = entry
            if fence is not None and not _complete(fence):
                waiting.append(entry)
                continue
            released.setdefault(worker_id, []).append(slab_id)
        pending.extend(waiting)
        return released

    @property
    def mapped_slabs(self) -> int:
        """How many slabs are mapped here now (for tests and stats)."""
        return len(self._mappings)

    def close(self) -> None:
        """Unlink every slab file of this loader still present; close the wake-up pipe.

        Call after the workers have stopped. Batches already handed out stay valid.
        """
        self._releases.close()
        self._mappings.clear()
        self._registrations.clear()
        sweep(self._config.shm_dir, self._config.prefix)


def _fenced_release(
    releases: _Releases,
    pinned: PinnedSlabs,
    worker_id: int,
    slab_id: int,
    registration: SlabRegistration | None,
) -> None:
    """A registered slab's batch is gone: release it once copies enqueued from it are done."""
    releases(worker_id, slab_id, pinned.fence(registration))


def _complete(fence: Fence) -> bool:
    try:
        return fence.query()
    except Exception:  # a broken device: nothing copies any more
        return True


_exit_dirs: set[str] = set()
_exit_pid: int | None = None


def _exit_hook(shm_dir: str) -> None:
    """At interpreter exit, unlink whatever slabs this process's loaders left."""
    global _exit_pid
    if _exit_pid != os.getpid():
        _exit_pid = os.getpid()
        _exit_dirs.clear()
        atexit.register(_sweep_at_exit, _exit_pid)
    _exit_dirs.add(shm_dir)


def _sweep_at_exit(pid: int) -> None:
    if os.getpid() != pid:
        return  # a forked child inherited the hook; the slabs are not its own
    for shm_dir in tuple(_exit_dirs):
        sweep(shm_dir, process_prefix(pid))
