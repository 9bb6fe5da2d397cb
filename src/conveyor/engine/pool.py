"""What every worker pool (processes or threads) offers the loader iterator."""

from __future__ import annotations

from typing import Any, Protocol


class WorkerDiedError(RuntimeError):
    """A worker ended without being asked to (killed, crashed, ``os._exit``)."""


class WorkerPool(Protocol):
    def send(self, worker_id: int, message: Any) -> None:
        """Queue a message for one worker; never blocks for long."""

    def receive(self, timeout_s: float | None) -> list[tuple[int, Any]]:
        """Ready ``(worker_id, message)`` pairs, waiting up to ``timeout_s``.

        Raises `WorkerDiedError` when a live worker has ended unexpectedly.
        """

    def retire(self, worker_id: int) -> None:
        """Stop one worker early (its stream ended and it is not persistent)."""

    def close(self) -> None:
        """End every worker and free every resource. Idempotent."""
