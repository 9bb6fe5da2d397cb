"""The tasks of one epoch between dispatch and delivery, and which worker gets the next one.

Pure bookkeeping (no pools, no processes), so it is unit-tested on its own.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["InFlight", "RoundRobin", "Ticket"]


class Ticket:
    """One dispatched task: its worker, its position in the epoch, whether it was answered.

    A plain slotted class: one is made per batch (a dataclass costs import time, S4)."""

    __slots__ = ("answered", "position", "worker_id")

    def __init__(self, worker_id: int, position: int, answered: bool = False) -> None:
        self.worker_id = worker_id
        self.position = position
        self.answered = answered

    def __repr__(self) -> str:
        return f"Ticket({self.worker_id}, {self.position}, answered={self.answered})"


class InFlight:
    """Every task of one epoch from dispatch until its result is delivered or forgotten.

    A task is *awaited* until its worker answers, then *held* (its result waits in the
    result buffer) until the iterator delivers it. Answers to tasks the ledger does not
    know (a previous epoch's) are ignored by the caller.
    """

    def __init__(self) -> None:
        self._tickets: dict[int, Ticket] = {}
        self._awaited = 0
        self._per_worker: dict[int, int] = {}  # tickets (awaited or held) per worker

    def load(self, worker_id: int) -> int:
        """Tasks of this worker dispatched and not yet delivered or forgotten."""
        return self._per_worker.get(worker_id, 0)

    def _forget(self, ticket: Ticket) -> None:
        self._per_worker[ticket.worker_id] -= 1

    @property
    def awaited(self) -> int:
        """Tasks dispatched and not yet answered."""
        return self._awaited

    @property
    def outstanding(self) -> int:
        """Tasks dispatched and not yet delivered or forgotten (what the prefetch limit
        counts, as torch's does: results waiting here hold memory too)."""
        return len(self._tickets)

    def dispatch(self, task_id: int, worker_id: int, position: int) -> None:
        self._tickets[task_id] = Ticket(worker_id, position)
        self._awaited += 1
        self._per_worker[worker_id] = self._per_worker.get(worker_id, 0) + 1

    def answer(self, task_id: int) -> Ticket | None:
        """Mark ``task_id`` answered; None if it is not awaited here (a late answer)."""
        ticket = self._tickets.get(task_id)
        if ticket is None or ticket.answered:
            return None
        ticket.answered = True
        self._awaited -= 1
        return ticket

    def deliver(self, task_id: int) -> Ticket:
        """The answered task's result leaves the iterator: forget it."""
        ticket = self._tickets.pop(task_id)
        self._forget(ticket)
        return ticket

    def drop(self, task_id: int) -> None:
        """Forget an answered task that delivers nothing (a stream's end)."""
        ticket = self._tickets.pop(task_id, None)
        if ticket is not None:
            self._forget(ticket)

    def orphan(self, worker_id: int, after: int = -1) -> list[int]:
        """Forget the awaited tasks of a worker that will not answer them (those sent after
        task ``after``); their ids. A worker answers in the order sent, so a task sent
        before the one its stream ended at is still answered, even when its answer comes
        second (Ray may report a small end-of-stream reply ready before a batch)."""
        orphans = [
            task_id
            for task_id, ticket in self._tickets.items()
            if ticket.worker_id == worker_id and not ticket.answered and task_id > after
        ]
        for task_id in orphans:
            self._forget(self._tickets.pop(task_id))
        self._awaited -= len(orphans)
        return orphans

    def holds(self, worker_id: int) -> bool:
        """Whether any task of this worker is awaited or waits for delivery."""
        return any(ticket.worker_id == worker_id for ticket in self._tickets.values())

    def worker_of(self, task_id: int) -> int | None:
        ticket = self._tickets.get(task_id)
        return None if ticket is None else ticket.worker_id


class RoundRobin:
    """Deals tasks to live workers in turn; a worker whose stream ended is skipped, and so
    is every worker from ``open`` on (autotune parks them: started, idle)."""

    def __init__(self, num_workers: int, active: list[bool] | None = None, start: int = 0):
        self.num_workers = num_workers
        self.active = [True] * num_workers if active is None else list(active)
        self.cursor = start  # the worker considered next
        self.open = num_workers  # workers [0, open) take tasks

    def takes_tasks(self, worker_id: int) -> bool:
        return worker_id < self.open and self.active[worker_id]

    @property
    def taking(self) -> int:
        """Workers that take tasks now."""
        return sum(self.active[: self.open])

    def next(self, advance: bool = True) -> int | None:
        """The next live worker (and move past it unless ``advance`` is False); None if none."""
        for step in range(self.num_workers):
            worker_id = (self.cursor + step) % self.num_workers
            if self.takes_tasks(worker_id):
                if advance:
                    self.cursor = (worker_id + 1) % self.num_workers
                return worker_id
        return None

    def next_with_room(self, has_room: Callable[[int], bool]) -> int | None:
        """The next live worker that ``has_room`` for another task, or None: with
        ``in_order=False`` a straggler is not fed more than its share (torch's rule). The
        cursor moves past every worker looked at, as torch's worker cycle does."""
        for _ in range(self.num_workers):
            worker_id = self.cursor
            self.cursor = (worker_id + 1) % self.num_workers
            if self.takes_tasks(worker_id) and has_room(worker_id):
                return worker_id
        return None

    def retire(self, worker_id: int) -> None:
        self.active[worker_id] = False
