"""What every worker pool (processes, threads, ...) offers the loader iterator."""

from __future__ import annotations

from typing import Protocol

from conveyor.engine.workers.messages import Reply, WorkerMessage


class WorkerDiedError(RuntimeError):
    """A worker ended without being asked to (killed, crashed, ``os._exit``)."""


class WorkerPool(Protocol):
    def send(self, worker_id: int, message: WorkerMessage) -> None:
        """Queue a message for one worker; never blocks for long."""

    def receive(self, timeout_s: float | None) -> list[tuple[int, Reply]]:
        """Ready ``(worker_id, reply)`` pairs, waiting up to ``timeout_s``.

        Raises `WorkerDiedError` when a live worker has ended unexpectedly.
        """

    def retire(self, worker_id: int) -> None:
        """Stop one worker early (its stream ended and it is not persistent)."""

    @property
    def bytes_received(self) -> int:
        """Bytes that crossed from the workers (0 where nothing is copied)."""

    def close(self, grace: bool = True) -> None:
        """End every worker and free every resource. Idempotent. Without ``grace`` (the
        workers did not answer within the loader's timeout) processes are terminated at
        once instead of being given a second to finish."""
