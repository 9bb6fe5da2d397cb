"""A read-only view of one worker that outlives its pool (torch's ``iterator._workers``).

torch's tests and some users keep ``iter(loader)._workers``, drop the iterator and then
``join()`` the workers and read ``exitcode``. conveyor's pool closes its process objects
(freeing their file descriptors) when it shuts down, so the view remembers the exit code
the pool saw and answers from it afterwards.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WorkerHandle"]


class WorkerHandle:
    """``pid``, ``is_alive()``, ``join()``, ``exitcode``, ``terminate()`` of one worker."""

    def __init__(self, process: Any):
        self._process: Any = process
        self.pid: int | None = process.pid
        self._final_exitcode: int | None = None

    def release(self) -> None:
        """The pool is closing the process object: keep its exit code, drop the object."""
        process, self._process = self._process, None
        if process is not None:
            self._final_exitcode = process.exitcode

    @property
    def exitcode(self) -> int | None:
        return self._final_exitcode if self._process is None else self._process.exitcode

    def is_alive(self) -> bool:
        return self._process is not None and self._process.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        if self._process is not None:
            self._process.join(timeout)

    def terminate(self) -> None:
        if self._process is not None:
            self._process.terminate()

    def __repr__(self) -> str:
        return f"WorkerHandle(pid={self.pid}, exitcode={self.exitcode})"
