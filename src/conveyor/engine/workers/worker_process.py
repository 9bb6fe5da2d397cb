"""The worker side of a worker process: its entry point and how it watches its parent."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import sys
from collections.abc import Callable
from multiprocessing import connection
from typing import Any, NoReturn

from conveyor.collate import set_output_allocator
from conveyor.engine.workers.messages import Reply, reply_to_wire, task_from_wire
from conveyor.engine.workers.worker_kind import WorkerSetup
from conveyor.engine.workers.worker_loop import run_worker
from conveyor.transport.options import SlabConfig
from conveyor.transport.worker_end import WorkerEnd, WorkerStop

PARENT_DEATH_SIGNAL = signal.SIGUSR2
_PR_SET_PDEATHSIG = 1
# Passed as parent_pid when the parent is not the main process (fork server, zygote):
# the worker then watches whichever process started it.
ANY_PARENT = -1
# How often an idle worker checks that the main process is still alive.
PARENT_CHECK_INTERVAL_S = 0.5


def exit_with_parent(parent_pid: int) -> None:
    """End this worker as soon as the main process dies, even inside slow user code.

    The kernel sends ``PARENT_DEATH_SIGNAL`` when the thread that started us ends; the
    handler exits only if the process itself is gone (a loader created in a short-lived
    thread must keep its workers). The idle loop's ``getppid`` check is the fallback.
    """

    def on_parent_death(signum: int, frame: object) -> None:
        if os.getppid() != parent_pid:
            _clean_up_and_exit()

    signal.signal(PARENT_DEATH_SIGNAL, on_parent_death)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL))
    if os.getppid() != parent_pid:  # died before prctl took effect
        _clean_up_and_exit()


_on_parent_death: list[Callable[[], None]] = []
"""What an orphaned worker does before it exits: unlink its shared-memory slabs, which
nobody else would (the main process is gone), so /dev/shm does not keep them until some
later loader reclaims them."""


def _clean_up_and_exit() -> NoReturn:
    for clean_up in _on_parent_death:
        with contextlib.suppress(Exception):
            clean_up()
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

    ``parent_pid`` is the main process, or `ANY_PARENT` when the worker was started by a
    fork server or zygote, which live exactly as long as the main process.
    """
    import torch

    if os.getppid() != parent_pid and parent_pid != ANY_PARENT:
        os._exit(0)  # the main process died while this worker was starting
    parent_pid = os.getppid()

    # Ctrl-C goes to the whole process group; the main process decides what to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent(parent_pid)
    torch.set_num_threads(1)
    if isinstance(setup, bytes):
        setup = pickle.loads(setup)
        assert isinstance(setup, WorkerSetup)

    # One poll set for the worker's life: `Connection.poll` builds a selector per call.
    waiter = select.poll()
    waiter.register(inbox.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
    check_ms = int(PARENT_CHECK_INTERVAL_S * 1000)

    def receive() -> Any:
        while True:
            if waiter.poll(check_ms):
                try:
                    return task_from_wire(inbox.recv())
                except (EOFError, OSError):
                    return None
            if os.getppid() != parent_pid:
                return None

    if slabs is None:

        def send_pickled(reply: Reply) -> None:
            outbox.send(reply_to_wire(reply))

        with contextlib.suppress(BrokenPipeError, EOFError, OSError):
            run_worker(setup, worker_id, receive, send_pickled)
        return
    end = WorkerEnd(slabs, worker_id, receive, outbox.send_bytes)

    def send(reply: Reply) -> None:
        end.send(reply_to_wire(reply))

    _on_parent_death.append(end.close)
    previous = set_output_allocator(end.allocate)  # collate stacks straight into slabs
    try:
        with contextlib.suppress(BrokenPipeError, EOFError, OSError, WorkerStop):
            run_worker(setup, worker_id, end.receive, send)
    finally:
        set_output_allocator(previous)
        end.close()
