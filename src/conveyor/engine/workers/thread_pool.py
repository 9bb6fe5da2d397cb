"""Worker threads: same protocol as the process pool, batches pass by reference."""

from __future__ import annotations

import os
import queue
import threading

from conveyor.engine.workers.messages import Reply, WorkerMessage
from conveyor.engine.workers.worker_info import clear_worker_info
from conveyor.engine.workers.worker_kind import WorkerSetup
from conveyor.engine.workers.worker_loop import run_worker

JOIN_TIMEOUT_S = 5.0


class ThreadPool:
    """Owns the worker threads and their queues; `close()` ends them all."""

    def __init__(self, setup: WorkerSetup):
        num_workers = setup.workers.num_workers
        self._inboxes: list[queue.SimpleQueue[WorkerMessage | None]] = []
        self._results: queue.SimpleQueue[tuple[int, Reply]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._owner_pid = os.getpid()
        for worker_id in range(num_workers):
            inbox: queue.SimpleQueue[WorkerMessage | None] = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._run,
                args=(setup, worker_id, inbox),
                name=f"conveyor-worker-{worker_id}",
                daemon=True,
            )
            self._inboxes.append(inbox)
            self._threads.append(thread)
            thread.start()

    def _run(
        self, setup: WorkerSetup, worker_id: int, inbox: queue.SimpleQueue[WorkerMessage | None]
    ) -> None:
        results = self._results
        try:
            run_worker(setup, worker_id, inbox.get, lambda m: results.put((worker_id, m)))
        finally:
            clear_worker_info()

    def send(self, worker_id: int, message: WorkerMessage) -> None:
        self._inboxes[worker_id].put(message)

    @property
    def bytes_received(self) -> int:
        """Nothing is copied: batches pass by reference."""
        return 0

    def receive(self, timeout_s: float | None) -> list[tuple[int, Reply]]:
        try:
            first = self._results.get(timeout=timeout_s)
        except queue.Empty:
            return []
        ready = [first]
        while True:
            try:
                ready.append(self._results.get_nowait())
            except queue.Empty:
                return ready

    def retire(self, worker_id: int) -> None:
        self._inboxes[worker_id].put(None)

    def close(self, grace: bool = True) -> None:
        """Ask every thread to stop and wait for it (a thread cannot be killed, so
        ``grace`` changes nothing)."""
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._owner_pid:
            return  # a forked copy: the threads ran in the parent
        for inbox in self._inboxes:
            inbox.put(None)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=JOIN_TIMEOUT_S)
