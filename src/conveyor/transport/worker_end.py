"""The worker process's end of the slab transport.

`WorkerEnd` wraps the worker's raw ``receive`` and ``send_bytes``: every task starts a
batch arena, whose ``allocate`` the engine installs as collate's output allocator (so
tensors are stacked straight into the arena's slabs), and every outgoing message is framed
with `to_shared`. Release and overflow messages from the main process are consumed here and
never reach the worker loop. One worker, one thread: not thread-safe.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from conveyor.transport import protocol
from conveyor.transport.options import SlabConfig
from conveyor.transport.shared import to_shared
from conveyor.transport.slab_pool import BatchArena, SlabPool

__all__ = ["WorkerEnd", "WorkerStop"]


class WorkerStop(BaseException):
    """Raised out of user code when the worker is told to stop while waiting for a slab.

    A BaseException so that the worker loop's ``except Exception`` lets it through.
    """


class WorkerEnd:
    """Batch framing and slab bookkeeping of one worker process.

    Args:
        config: The loader's slab settings.
        worker_id: This worker's id (part of every slab name).
        receive: Blocks for the next message from the main process; None means stop.
        send_bytes: Sends one frame to the main process.

    ``close()`` unlinks the slab files this worker created that the main process has not
    attached yet.
    """

    def __init__(
        self,
        config: SlabConfig,
        worker_id: int,
        receive: Callable[[], Any],
        send_bytes: Callable[[bytes], None],
    ):
        self._config = config
        self._receive = receive
        self._send_bytes = send_bytes
        self._pool = SlabPool(config, worker_id)
        self._arena = BatchArena(self._pool, self._wait_for_release)
        self._stash: deque[Any] = deque()
        self._stall_seq = 0

    @property
    def allocate(self) -> Callable[[int, Any], Any]:
        """Collate's output allocator for this worker: buffers in the current task's arena."""
        return self._arena.allocate

    def receive(self) -> Any:
        """The next engine message (None: stop); handles transport messages on the way."""
        while True:
            message = self._stash.popleft() if self._stash else self._receive()
            if message is None:
                return None
            if protocol.is_control(message, protocol.RELEASE):
                self._pool.release(message[1])
                continue
            if protocol.is_control(message, protocol.OVERFLOW):
                continue  # answers a stall that a release already ended
            self._arena.begin()
            return message

    def send(self, message: Any) -> None:
        """Frame ``message``; its tensors and arrays go into (or stay in) slabs."""
        body, referenced = to_shared(message, self._arena, self._config.inline_max_bytes)
        pool = self._pool
        note = pool.scarce if self._arena.degraded else None
        self._send_bytes(protocol.header(pool.retired, note, None) + body)
        pool.retired.clear()
        if note is not None:
            pool.scarce = None
        self._arena.finish(referenced)

    def _wait_for_release(self) -> bool:
        """Ask the main process for a slab; True once one may be free, False to give up."""
        self._stall_seq += 1
        seq = self._stall_seq
        self._send_bytes(protocol.header(self._pool.retired, None, seq))
        self._pool.retired.clear()
        while True:
            message = self._receive()
            if message is None:
                self._stash.append(None)
                raise WorkerStop
            if protocol.is_control(message, protocol.RELEASE):
                self._pool.release(message[1])
                return True
            if protocol.is_control(message, protocol.OVERFLOW):
                if message[1] == seq:
                    return False
                continue
            self._stash.append(message)

    def close(self) -> None:
        self._pool.close()
