"""Worker processes: one task pipe and one result pipe per worker.

The main process waits on every result pipe *and* every process sentinel at once (one
``select.poll`` object, registered once), so a worker that dies is noticed the moment
it dies rather than after a polling interval.

Batches cross through shared-memory slabs (`conveyor.transport`): workers send frames
made by `WorkerEnd`, and `receive` decodes them with `MainEnd` into zero-copy views. Slab
releases and stall answers ride back on the task pipes (docs/design/transport.md).

Under spawn/forkserver the workers are forked by the loader's `Zygote` (one clean process
that imported torch and unpickled the dataset once) instead of started one by one.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from multiprocessing import connection
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING, Any

from conveyor.engine.workers.forking import garbage_kept_from_children
from conveyor.engine.workers.messages import (
    Reply,
    Task,
    WorkerMessage,
    reply_from_wire,
    task_to_wire,
)
from conveyor.engine.workers.pool import WorkerDiedError
from conveyor.engine.workers.shutdown import stop_processes, worker_death_message
from conveyor.engine.workers.worker_handle import WorkerHandle
from conveyor.engine.workers.worker_kind import WorkerSetup
from conveyor.engine.workers.worker_process import ANY_PARENT, process_worker_main
from conveyor.transport.cuda_host import HostRegistrar
from conveyor.transport.main_end import SKIP, MainEnd
from conveyor.transport.options import SlabOptions
from conveyor.transport.pinned_slabs import PinnedSlabs
from conveyor.transport.slab import loader_prefix

if TYPE_CHECKING:
    from conveyor.engine.workers.zygote import Zygote

# A busy worker gets this long to notice the stop message before it is terminated.
JOIN_TIMEOUT_S = 1.0
_POLL_IN = select.POLLIN | select.POLLHUP | select.POLLERR


_PICKLE_ERRORS = (TypeError, AttributeError, pickle.PicklingError)


_live_pools: weakref.WeakSet[ProcessPool] = weakref.WeakSet()
_exit_hook_pid: int | None = None


def _close_at_exit(pool: ProcessPool) -> None:
    """Close pools still open when the interpreter exits while the modules still exist.

    An iterator alive at exit is otherwise closed by its ``__del__`` during module
    teardown, when multiprocessing's own globals are already gone. Registered after the
    slab sweep (``MainEnd``), so it runs before it: workers stop, then slabs go.
    """
    global _exit_hook_pid
    if _exit_hook_pid != os.getpid():
        _exit_hook_pid = os.getpid()
        _live_pools.clear()  # a forked child's copies belong to its parent
        atexit.register(_close_live_pools, _exit_hook_pid)
    _live_pools.add(pool)


def _close_live_pools(pid: int) -> None:
    if os.getpid() != pid:
        return
    for pool in list(_live_pools):
        pool.close()


@contextlib.contextmanager
def _pickle_errors_warned() -> Iterator[None]:
    """torch's warning before a worker's arguments fail to pickle (users search for it)."""
    try:
        yield
    except _PICKLE_ERRORS:
        warnings.warn(
            "Got pickle error when attempting to start a worker Process. This might be "
            "because the worker Process arguments are not picklable (the dataset, "
            "collate_fn, worker_init_fn, ...). Start methods 'spawn' and 'forkserver' "
            "pickle them; you can also try multiprocessing_context='fork'.",
            stacklevel=4,
        )
        raise


def _needs_inheritance(exc: RuntimeError) -> bool:
    """The error multiprocessing raises for a Value/Lock/Event pickled outside spawning."""
    return "through inheritance" in str(exc)


def _pickled_or_inherited(setup: WorkerSetup) -> Any:
    """The set-up pickled once for every worker, or the set-up itself when it holds
    multiprocessing objects that only ``Process.start()`` may pickle (as torch does)."""
    try:
        return pickle.dumps(setup, protocol=pickle.HIGHEST_PROTOCOL)
    except RuntimeError as exc:
        if not _needs_inheritance(exc):
            raise
        return setup


_SPAWNING = threading.Lock()
"""Held while a pool creates its pipes and starts its workers (see ``_start_workers``)."""


class ProcessPool:
    """Owns the worker processes, their pipes and their slabs; `close()` ends them all.

    ``send``, ``retire`` and ``interrupt`` may be called from one thread while another
    blocks in ``receive`` (the pin-memory thread); ``receive`` itself from one thread at a
    time. With a ``registrar`` (``pin_memory=True`` on CUDA) the slabs are registered as
    pinned memory as they are first mapped here (transport/pinned_slabs.py).
    """

    def __init__(
        self,
        setup: WorkerSetup,
        context: BaseContext,
        zygote: Zygote | None = None,
        registrar: HostRegistrar | None = None,
    ):
        options = setup.workers
        num_workers = options.num_workers
        self._num_workers = num_workers
        self._inboxes: list[connection.Connection] = []
        self._outboxes: list[connection.Connection] = []
        self._processes: list[Any] = []
        self._handles: list[WorkerHandle] = []
        self._alive = [True] * num_workers
        self._closed = False
        self._owner_pid = os.getpid()
        self._send_locks = [threading.Lock() for _ in range(num_workers)]
        slab_options = options.slab_options or SlabOptions.from_env()
        prefetch = 2 if options.prefetch_factor is None else options.prefetch_factor
        slabs = slab_options.resolve(loader_prefix(), num_workers, prefetch)
        pinned = PinnedSlabs(registrar) if registrar is not None else None
        self._link = MainEnd(slabs, self._send_control, pinned)
        _close_at_exit(self)
        self._poller = select.poll()
        self._fd_owner: dict[int, tuple[str, int]] = {}  # fd -> ("result"|"exit", worker)
        try:
            self._start_workers(setup, context, zygote)
        except BaseException:
            self.close()
            raise
        self._poller.register(self._link.wake_fd, _POLL_IN)

    def _start_workers(self, setup: WorkerSetup, ctx: BaseContext, zygote: Zygote | None) -> None:
        # fork inherits the setup as is; otherwise it is pickled once for all workers, or
        # (zygote) once per change of the dataset.
        payload: Any = setup
        if zygote is not None:
            from conveyor.engine.workers.zygote import SetupRef  # spawn/forkserver only

            payload = SetupRef(setup.seeds)
        elif ctx.get_start_method() != "fork":
            with _pickle_errors_warned():
                payload = _pickled_or_inherited(setup)
        parent = os.getpid() if ctx.get_start_method() == "fork" and zygote is None else ANY_PARENT
        # One loader at a time creates pipes and forks: a fork from another thread in
        # between would copy this loader's child ends (and the sentinel pipes Process.start
        # makes) into that loader's workers, so end-of-file and exit would never be seen
        # here until those unrelated workers exit.
        with _SPAWNING, garbage_kept_from_children():
            self._spawn(setup, ctx, zygote, payload, parent)
        self._handles = [WorkerHandle(process) for process in self._processes]
        for worker_id in range(self._num_workers):
            self._watch(self._outboxes[worker_id].fileno(), "result", worker_id)
            self._watch(self._processes[worker_id].sentinel, "exit", worker_id)

    def _spawn(
        self, setup: WorkerSetup, ctx: BaseContext, zygote: Zygote | None, payload: Any, parent: int
    ) -> None:
        jobs = []
        child_ends = []
        for worker_id in range(self._num_workers):
            task_reader, task_writer = ctx.Pipe(duplex=False)
            result_reader, result_writer = ctx.Pipe(duplex=False)
            self._inboxes.append(task_writer)
            self._outboxes.append(result_reader)
            args = (worker_id, payload, task_reader, result_writer, parent, self._link.config)
            jobs.append((process_worker_main, args))
            child_ends += [task_reader, result_writer]
        try:
            with _pickle_errors_warned():
                self._launch(setup, ctx, zygote, jobs)
        finally:
            for end in child_ends:
                end.close()

    def _launch(
        self,
        setup: WorkerSetup,
        ctx: BaseContext,
        zygote: Zygote | None,
        jobs: list[tuple[Callable[..., None], tuple[Any, ...]]],
    ) -> None:
        """Start the worker processes: forked by the zygote, or by ``ctx.Process``."""
        if zygote is not None:
            try:
                self._processes = list(zygote.start_workers(setup, jobs))
            except RuntimeError as exc:
                if not _needs_inheritance(exc):
                    raise
                # multiprocessing Value/Lock/...: only a spawning Process may pickle them
                jobs = [(t, (a[0], setup, *a[2:])) for t, a in jobs]
                zygote = None
        if zygote is None:
            for worker_id, (target, args) in enumerate(jobs):
                process = ctx.Process(  # type: ignore[attr-defined]
                    target=target,
                    args=args,
                    name=f"conveyor-worker-{worker_id}",
                    daemon=True,
                )
                self._processes.append(process)
                process.start()

    def _watch(self, fd: int, kind: str, worker_id: int) -> None:
        self._fd_owner[fd] = (kind, worker_id)
        self._poller.register(fd, _POLL_IN)

    def _unwatch(self, worker_id: int) -> None:
        for fd, (_, owner) in list(self._fd_owner.items()):
            if owner == worker_id:
                del self._fd_owner[fd]
                with contextlib.suppress(KeyError, ValueError):
                    self._poller.unregister(fd)

    @property
    def handles(self) -> list[WorkerHandle]:
        """Views of the worker processes that stay readable after `close()`."""
        return self._handles

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes]

    def send(self, worker_id: int, message: WorkerMessage) -> None:
        # Plain pickle: tasks carry no file descriptors, and ForkingPickler costs ~10 us.
        wire = task_to_wire(message) if type(message) is Task else message
        frame = pickle.dumps(wire, protocol=pickle.HIGHEST_PROTOCOL)
        # Releases first: the worker then builds this task's batch in a slab it already has,
        # instead of making one more while the release waits for our next receive.
        self._link.before_wait()
        try:
            with self._send_locks[worker_id]:
                self._inboxes[worker_id].send_bytes(frame)
        except (BrokenPipeError, OSError):
            self._raise_if_dead(worker_id)
            raise

    def receive(self, timeout_s: float | None) -> list[tuple[int, Reply]]:
        """Results that are ready (waiting up to ``timeout_s``); raises if a worker died.

        Returns early with no results after `interrupt()`.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            self._link.before_wait()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            timeout_ms = None if remaining is None else int(remaining * 1000)
            ready = {fd for fd, _ in self._poller.poll(timeout_ms)}
            interrupted = self._link.woken(ready)
            results = self._read(ready)
            if results or interrupted or (deadline is not None and time.monotonic() >= deadline):
                return results

    def _read(self, ready: set[int]) -> list[tuple[int, Reply]]:
        results: list[tuple[int, Reply]] = []
        exited = []
        for fd in sorted(ready):
            kind, i = self._fd_owner.get(fd, ("", -1))
            if kind == "exit":
                exited.append(i)
            elif kind == "result":
                try:
                    frame = self._outboxes[i].recv_bytes()
                except (EOFError, OSError):
                    self._raise_if_dead(i, wait_s=JOIN_TIMEOUT_S)
                    continue
                message = self._link.decode(i, frame)
                if message is not SKIP:
                    results.append((i, reply_from_wire(message)))
        answered = {i for i, _ in results}
        for i in exited:
            # its last results are delivered first: a worker that answered in this call is
            # checked again at the next one (its sentinel stays ready)
            if i not in answered and not self._outboxes[i].poll():
                self._raise_if_dead(i, wait_s=0.0)
        return results

    def _send_control(self, worker_id: int, message: Any) -> None:
        if self._alive[worker_id]:
            frame = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
            with contextlib.suppress(OSError), self._send_locks[worker_id]:
                self._inboxes[worker_id].send_bytes(frame)

    def interrupt(self) -> None:
        """Make a ``receive`` blocked in another thread return (with no results) soon."""
        self._link.interrupt()

    @property
    def bytes_received(self) -> int:
        """Bytes that crossed from the workers: pipe frames plus shared-memory data."""
        return self._link.bytes_received

    @property
    def pinned_slabs(self) -> PinnedSlabs | None:
        """The slabs' registrations as pinned memory (None: not registered)."""
        return self._link.pinned

    @property
    def mapped_slabs(self) -> int:
        """Slabs mapped in this process now (tests, stats)."""
        return self._link.mapped_slabs

    def retire(self, worker_id: int) -> None:
        """Stop one worker whose stream ended (non-persistent loaders free it early)."""
        if self._alive[worker_id]:
            self._alive[worker_id] = False
            self._unwatch(worker_id)
            with contextlib.suppress(OSError), self._send_locks[worker_id]:
                self._inboxes[worker_id].send(None)

    def _raise_if_dead(self, worker_id: int, wait_s: float = 1.0) -> None:
        process = self._processes[worker_id]
        process.join(timeout=wait_s)
        if process.exitcode is None:
            return
        self._alive[worker_id] = False
        self._unwatch(worker_id)
        raise WorkerDiedError(worker_death_message(worker_id, process.pid, process.exitcode))

    def close(self, grace: bool = True) -> None:
        """Stop every worker: ask politely (and wait, with ``grace``), then terminate, then
        kill. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._owner_pid:
            return  # a forked copy: the workers, pipes and slabs belong to the parent
        for inbox, lock in zip(self._inboxes, self._send_locks, strict=False):
            with contextlib.suppress(OSError), lock:
                inbox.send(None)
        stop_processes(self._processes, JOIN_TIMEOUT_S, grace)
        for conn in self._inboxes + self._outboxes:
            conn.close()
        for handle in self._handles:
            handle.release()
        for process in self._processes:
            # another thread's Process.start() may reap it first (multiprocessing polls
            # every child there); close() then cannot tell that it ended: nothing to free
            with contextlib.suppress(ValueError):
                process.close()
        self._link.close()  # unlinks slabs no one mapped (a worker killed mid-batch)
