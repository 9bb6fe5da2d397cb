"""A cursor for nodes that expand each input item into many outputs (files, tar members).

Its state is *where in the input* plus *where inside the current item*: the input's state
taken just before the current item was pulled, and a position the node defines (a member
offset, a byte offset, an index). Resuming restarts the input at that state, pulls the
same item again and asks the node to continue from the position, so nothing before it is
replayed. Failures inside an item go through the node's `ErrorPolicy`: raised, or counted
and the rest of the item skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, TypeVar

from conveyor.datapipes.base import Cursor, IterDataPipe, StateDict, check_version, sub_state
from conveyor.datapipes.functional import register_op
from conveyor.formats.errors import ErrorPolicy, SampleError

__all__ = ["ExpandingCursor", "register_functional"]

T = TypeVar("T")

Expansion = Iterator[tuple[T, Any]]
"""What ``expand`` returns: ``(output, position after it)`` pairs."""


def register_functional(name: str, cls: type) -> None:
    """Make the typed method ``dp.<name>(...)`` of `IterDataPipe` build ``cls``."""
    register_op(f"iter.{name}", cls)


class ExpandingCursor(Cursor[T]):
    """Pulls items from ``source`` and yields what ``expand(item, position)`` produces.

    Subclasses implement ``expand``; ``position`` is None for a fresh item, else the
    position saved in the state (for the first item after a resume only). ``release``
    frees what an item holds (e.g. closes its stream).
    """

    version: ClassVar[int] = 1

    def __init__(
        self, source: IterDataPipe[Any], state: StateDict | None, who: str, policy: ErrorPolicy
    ) -> None:
        if state is not None:
            check_version(state, self.version, who)
        self.source = source
        self.who = who
        self.policy = policy
        self._before = sub_state(state, "source")
        source._restart(self._before)
        self._resume: Any = None if state is None else state.get("position")
        self._item: Any = None
        self._inner: Expansion[T] | None = None
        self._position: Any = None

    def expand(self, item: Any, position: Any) -> Expansion[T]:
        raise NotImplementedError

    def release(self, item: Any) -> None:
        """Free the resources of a finished item (default: nothing)."""

    def _pull(self) -> None:
        before = self.source._held_state()
        try:
            item = self.source.nonblocking_next()
        except StopIteration:
            self.policy.end_of_stream()
            raise
        self._before = before
        self._item = item
        position, self._resume = self._resume, None
        self._position = position
        self._inner = self.expand(item, position)

    def _finish(self) -> None:
        item, self._item, self._inner = self._item, None, None
        self._position = None
        if item is not None:
            self.release(item)

    def next(self) -> T:
        while True:
            if self._inner is None:
                self._pull()
            assert self._inner is not None
            try:
                value, self._position = next(self._inner)
            except StopIteration:
                self._finish()
                continue
            except SampleError as error:
                self._finish()
                self.policy.handle(error)
                continue
            return value

    def state(self) -> StateDict:
        if self._inner is None:
            source = self.source._held_state()
            return {"version": self.version, "source": source, "position": self._resume}
        return {"version": self.version, "source": self._before, "position": self._position}

    def close(self) -> None:
        self._finish()
        self.source.close()
