"""Result buffers: hand results back in sampler order, or as soon as they are ready.

The strategy is picked once per loader (``in_order``) so the iterator has no
per-call branches on it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Protocol

_MISSING = object()


class ResultBuffer(Protocol):
    def expect(self, task_id: int) -> None:
        """A task was dispatched; its result will arrive later (or be forgotten)."""

    def put(self, task_id: int, result: Any) -> None:
        """A task's result arrived."""

    def forget(self, task_ids: Iterable[int]) -> None:
        """These tasks will never produce a result (their worker's stream ended)."""

    def pop(self) -> Any:
        """The next result to hand out, or `EMPTY` when it has not arrived yet."""

    def __len__(self) -> int:
        """Number of tasks dispatched and not yet popped or forgotten."""


EMPTY: Any = _MISSING


class InOrderBuffer:
    """Holds early results until every earlier task's result has been handed out."""

    def __init__(self) -> None:
        self._pending: deque[int] = deque()  # dispatched task ids, in dispatch order
        self._forgotten: set[int] = set()
        self._arrived: dict[int, Any] = {}

    def expect(self, task_id: int) -> None:
        self._pending.append(task_id)

    def put(self, task_id: int, result: Any) -> None:
        self._arrived[task_id] = result

    def head(self) -> int | None:
        """The task whose result is handed out next, if any is pending."""
        for task_id in self._pending:
            if task_id not in self._forgotten:
                return task_id
        return None

    def forget(self, task_ids: Iterable[int]) -> None:
        self._forgotten.update(task_ids)

    def pop(self) -> Any:
        pending = self._pending
        while pending:
            head = pending[0]
            if head in self._forgotten:
                self._forgotten.discard(head)
                pending.popleft()
                continue
            result = self._arrived.pop(head, _MISSING)
            if result is _MISSING:
                return EMPTY
            pending.popleft()
            return result
        return EMPTY

    def __len__(self) -> int:
        return len(self._pending) - len(self._forgotten)


class ReadyFirstBuffer:
    """Hands results out in arrival order (``in_order=False``)."""

    def __init__(self) -> None:
        self._ready: deque[Any] = deque()
        self._outstanding: set[int] = set()

    def expect(self, task_id: int) -> None:
        self._outstanding.add(task_id)

    def put(self, task_id: int, result: Any) -> None:
        self._outstanding.discard(task_id)
        self._ready.append(result)

    def forget(self, task_ids: Iterable[int]) -> None:
        self._outstanding.difference_update(task_ids)

    def pop(self) -> Any:
        if not self._ready:
            return EMPTY
        return self._ready.popleft()

    def __len__(self) -> int:
        return len(self._outstanding) + len(self._ready)


def make_buffer(in_order: bool) -> InOrderBuffer | ReadyFirstBuffer:
    return InOrderBuffer() if in_order else ReadyFirstBuffer()
