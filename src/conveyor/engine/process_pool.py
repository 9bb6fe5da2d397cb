"""Worker processes: one task pipe and one result pipe per worker.

The main process waits on every result pipe *and* every process sentinel at once
(`multiprocessing.connection.wait`), so a worker that dies is noticed the moment it
dies rather than after a polling interval.

Batches cross through shared-memory slabs (`conveyor.transport`): workers send frames
made by `WorkerEnd`, and `receive` decodes them with `MainEnd` into zero-copy views. Slab
releases and stall answers ride back on the task pipes (docs/design/transport.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import signal
import sys
import threading
import time
from multiprocessing import connection
from multiprocessing.context import BaseContext
from typing import Any

from conveyor.engine.pool import WorkerDiedError
from conveyor.engine.worker_loop import WorkerSetup, run_worker
from conveyor.transport.main_end import SKIP, MainEnd
from conveyor.transport.options import SlabConfig, SlabOptions
from conveyor.transport.slab import loader_prefix
from conveyor.transport.worker_end import WorkerEnd, WorkerStop

PARENT_DEATH_SIGNAL = signal.SIGUSR2
_PR_SET_PDEATHSIG = 1
_FORKSERVER_PARENT = -1
# How often an idle worker checks that the main process is still alive.
PARENT_CHECK_INTERVAL_S = 0.5
# A busy worker gets this long to notice the stop message before it is terminated.
JOIN_TIMEOUT_S = 1.0


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "is not responding"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by signal {-exitcode} ({name})"
    return f"exited with code {exitcode}"


def exit_with_parent(parent_pid: int) -> None:
    """End this worker as soon as the main process dies, even inside slow user code.

    The kernel sends ``PARENT_DEATH_SIGNAL`` when the thread that started us ends; the
    handler exits only if the process itself is gone (a loader created in a short-lived
    thread must keep its workers). The idle loop's ``getppid`` check is the fallback.
    """

    def on_parent_death(signum: int, frame: object) -> None:
        if os.getppid() != parent_pid:
            os._exit(0)

    signal.signal(PARENT_DEATH_SIGNAL, on_parent_death)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL))
    if os.getppid() != parent_pid:  # died before prctl took effect
        os._exit(0)


def process_worker_main(
    worker_id: int,
    setup: WorkerSetup | bytes,
    inbox: connection.Connection,
    outbox: connection.Connection,
    parent_pid: int,
    slabs: SlabConfig | None = None,
) -> None:
    """Entry point of a worker process (module level so that spawn can import it).

    With ``slabs``, batches go through the shared-memory slab transport (frames made by
    `WorkerEnd`); without, every message is pickled onto ``outbox``.

    ``parent_pid`` is the main process; under forkserver the parent is the fork server,
    which lives exactly as long as the main process, so the parent at start-up is watched.
    """
    import torch

    if os.getppid() != parent_pid and parent_pid != _FORKSERVER_PARENT:
        os._exit(0)  # the main process died while this worker was starting
    parent_pid = os.getppid()

    # Ctrl-C goes to the whole process group; the main process decides what to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent(parent_pid)
    torch.set_num_threads(1)
    if isinstance(setup, bytes):
        setup = pickle.loads(setup)
        assert isinstance(setup, WorkerSetup)

    def receive() -> Any:
        while True:
            if inbox.poll(PARENT_CHECK_INTERVAL_S):
                try:
                    return inbox.recv()
                except (EOFError, OSError):
                    return None
            if os.getppid() != parent_pid:
                return None

    if slabs is None:
        with contextlib.suppress(BrokenPipeError, EOFError, OSError):
            run_worker(setup, worker_id, receive, outbox.send)
        return
    end = WorkerEnd(slabs, worker_id, receive, outbox.send_bytes)
    try:
        with contextlib.suppress(BrokenPipeError, EOFError, OSError, WorkerStop):
            run_worker(setup, worker_id, end.receive, end.send)
    finally:
        end.close()


class ProcessPool:
    """Owns the worker processes, their pipes and their slabs; `close()` ends them all.

    ``send``, ``retire`` and ``interrupt`` may be called from one thread while another
    blocks in ``receive`` (the pin-memory thread); ``receive`` itself from one thread at a
    time.
    """

    def __init__(
        self,
        setup: WorkerSetup,
        num_workers: int,
        context: BaseContext,
        slab_options: SlabOptions | None = None,
        prefetch_factor: int = 2,
    ):
        self._num_workers = num_workers
        self._inboxes: list[connection.Connection] = []
        self._outboxes: list[connection.Connection] = []
        self._processes: list[Any] = []
        self._alive = [True] * num_workers
        self._closed = False
        self._send_locks = [threading.Lock() for _ in range(num_workers)]
        options = slab_options or SlabOptions.from_env()
        slabs = options.resolve(loader_prefix(), num_workers, prefetch_factor)
        self._link = MainEnd(slabs, self._send_control)
        # Under fork the setup is inherited as is; otherwise pickle it once for all workers.
        payload: WorkerSetup | bytes = setup
        if context.get_start_method() != "fork":
            payload = pickle.dumps(setup, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            for worker_id in range(num_workers):
                self._start_one(worker_id, payload, context)
        except BaseException:
            self.close()
            raise

    def _start_one(self, worker_id: int, payload: WorkerSetup | bytes, ctx: BaseContext) -> None:
        parent = _FORKSERVER_PARENT if ctx.get_start_method() == "forkserver" else os.getpid()
        task_reader, task_writer = ctx.Pipe(duplex=False)
        result_reader, result_writer = ctx.Pipe(duplex=False)
        process = ctx.Process(  # type: ignore[attr-defined]
            target=process_worker_main,
            args=(worker_id, payload, task_reader, result_writer, parent, self._link.config),
            name=f"conveyor-worker-{worker_id}",
            daemon=True,
        )
        self._inboxes.append(task_writer)
        self._outboxes.append(result_reader)
        self._processes.append(process)
        process.start()
        task_reader.close()
        result_writer.close()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes]

    def send(self, worker_id: int, message: Any) -> None:
        try:
            with self._send_locks[worker_id]:
                self._inboxes[worker_id].send(message)
        except (BrokenPipeError, OSError):
            self._raise_if_dead(worker_id)
            raise

    def receive(self, timeout_s: float | None) -> list[tuple[int, Any]]:
        """Results that are ready (waiting up to ``timeout_s``); raises if a worker died.

        Returns early with no results after `interrupt()`.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            self._link.before_wait()
            live = [i for i in range(self._num_workers) if self._alive[i]]
            waitables: list[Any] = [self._outboxes[i] for i in live]
            waitables += [self._processes[i].sentinel for i in live]
            waitables.append(self._link.wake_fd)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = set(connection.wait(waitables, remaining))
            interrupted = self._link.woken(ready)
            results = self._read(live, ready)
            if results or interrupted or (deadline is not None and time.monotonic() >= deadline):
                return results

    def _read(self, live: list[int], ready: set[Any]) -> list[tuple[int, Any]]:
        results: list[tuple[int, Any]] = []
        for i in live:
            outbox = self._outboxes[i]
            if outbox in ready:
                try:
                    frame = outbox.recv_bytes()
                except (EOFError, OSError):
                    self._raise_if_dead(i, wait_s=JOIN_TIMEOUT_S)
                else:
                    message = self._link.decode(i, frame)
                    if message is not SKIP:
                        results.append((i, message))
                    continue
            if self._processes[i].sentinel in ready:
                self._raise_if_dead(i, wait_s=0.0)
        return results

    def _send_control(self, worker_id: int, message: Any) -> None:
        if self._alive[worker_id]:
            with contextlib.suppress(OSError), self._send_locks[worker_id]:
                self._inboxes[worker_id].send(message)

    def interrupt(self) -> None:
        """Make a ``receive`` blocked in another thread return (with no results) soon."""
        self._link.interrupt()

    @property
    def mapped_slabs(self) -> int:
        """Slabs mapped in this process now (tests, stats)."""
        return self._link.mapped_slabs

    def retire(self, worker_id: int) -> None:
        """Stop one worker whose stream ended (non-persistent loaders free it early)."""
        if self._alive[worker_id]:
            self._alive[worker_id] = False
            with contextlib.suppress(OSError), self._send_locks[worker_id]:
                self._inboxes[worker_id].send(None)

    def _raise_if_dead(self, worker_id: int, wait_s: float = 1.0) -> None:
        process = self._processes[worker_id]
        process.join(timeout=wait_s)
        if process.exitcode is None:
            return
        self._alive[worker_id] = False
        raise WorkerDiedError(
            f"DataLoader worker {worker_id} (pid {process.pid}) exited unexpectedly: "
            f"it {describe_exit(process.exitcode)}. If it was killed for memory (signal 9), "
            "lower batch_size or num_workers; a segfault (signal 11) points at a native "
            "library in the dataset code."
        )

    def close(self) -> None:
        """Stop every worker: ask politely, then terminate, then kill. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for inbox, lock in zip(self._inboxes, self._send_locks, strict=False):
            with contextlib.suppress(OSError), lock:
                inbox.send(None)
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for process in self._processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self._processes:
            if process.exitcode is None:
                process.terminate()
        for process in self._processes:
            process.join(timeout=JOIN_TIMEOUT_S)
            if process.exitcode is None:
                process.kill()
                process.join()
        for conn in self._inboxes + self._outboxes:
            conn.close()
        for process in self._processes:
            process.close()
        self._link.close()  # unlinks slabs no one mapped (a worker killed mid-batch)
