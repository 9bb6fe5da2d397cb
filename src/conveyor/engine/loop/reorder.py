"""Result buffers: hand results back in sampler order, or as soon as they are ready.

The strategy is picked once per loader (``in_order``) so the iterator has no
per-call branches on it. Both buffers: ``expect(task_id)`` when a task is dispatched,
``put(task_id, result)`` when it arrives, ``forget(task_ids)`` for tasks that will never
answer, ``pop()`` the next result or `EMPTY`, ``len()`` tasks not yet popped or forgotten.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

_MISSING = object()


EMPTY: Any = _MISSING


class InOrderBuffer:
    """Holds early results until every earlier task's result has been handed out."""

    def __init__(self) -> None:
        self._pending: deque[int] = deque()  # dispatched task ids, in dispatch order
        self._forgotten: set[int] = set()
        self._arrived: dict[int, Any] = {}

    def expect(self, task_id: int) -> None:
        self._pending.append(task_id)

    @property
    def held(self) -> int:
        """Results that arrived and wait for an earlier one (head-of-line blocking)."""
        return len(self._arrived)

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

    held = 0  # no result ever waits for another

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
