"""Cursors: the runtime of one pass over a DataPipe.

A `Cursor` is created by a node's ``_make_cursor(state)`` at the first pull of a pass and
holds everything that changes while iterating (positions, buffers, RNG state, handles of
threads or processes); the node itself keeps only its configuration. ``state()`` returns a
`StateDict` from which ``_make_cursor(state)`` continues after the last item returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

__all__ = [
    "Cursor",
    "FRESH_STATE",
    "SourceCursor",
    "StateDict",
    "Upstream",
    "check_version",
    "sub_state",
]

T_co = TypeVar("T_co", covariant=True)

StateDict = dict[str, Any]
"""A node's state: a small dict with an int ``"version"`` key, nesting its inputs' states."""

FRESH_STATE: StateDict = {"version": 1, "fresh": True}
"""The state of a pipe that has not started a pass (loading it means: start fresh)."""


def check_version(state: Mapping[str, Any], expected: int, who: str) -> None:
    """Raise a clear `ValueError` unless ``state`` is a dict of version ``expected``."""
    version = state.get("version") if isinstance(state, Mapping) else None
    if version != expected:
        raise ValueError(
            f"{who}: cannot load state with version {version!r} (expected {expected}); "
            "pass a state_dict() taken from the same pipeline and conveyor version"
        )


class Upstream(Protocol[T_co]):
    """What a cursor needs of the pipe it reads (every `IterDataPipe` is one)."""

    def nonblocking_next(self) -> T_co: ...

    def _held_state(self) -> StateDict: ...

    def _restart(self, state: Mapping[str, Any] | None) -> None: ...

    def close(self) -> None: ...

    def item_position(self) -> tuple[str, int] | None: ...

    def can_reread(self) -> bool: ...

    def reread(self, positions: Sequence[tuple[str, int]]) -> Sequence[T_co]: ...


class Cursor(Generic[T_co]):
    """The runtime state of one pass over a node; created by the node's ``_make_cursor``.

    ``next()`` follows ``nonblocking_next``'s contract; ``state()`` returns a `StateDict`
    from which ``_make_cursor(state)`` continues after the last item returned; ``close()``
    releases resources and closes the inputs. A cursor must leave itself consistent when
    an input raises `NotAvailable` (mutate only after a successful pull).
    """

    def next(self) -> T_co:
        raise NotImplementedError

    def state(self) -> StateDict:
        raise NotImplementedError

    def close(self) -> None:
        """Release resources; the default does nothing."""

    def item_position(self) -> tuple[str, int] | None:
        """Where the item last returned by ``next()`` can be read again (its node's
        ``reread``), or None: this cursor cannot say (the default)."""
        return None


class SourceCursor(Cursor[T_co]):
    """A cursor reading one input: restarts it, nests its state under ``"source"``, closes it.

    Subclasses add their own fields through ``extra_state()`` and read them back from the
    ``state`` given to ``__init__`` (already version-checked here).
    """

    version: ClassVar[int] = 1

    def __init__(self, source: Upstream[Any], state: StateDict | None, who: str) -> None:
        if state is not None:
            check_version(state, self.version, who)
        self.source = source
        source._restart(sub_state(state, "source"))

    def state(self) -> StateDict:
        return {"version": self.version, "source": self.source._held_state(), **self.extra_state()}

    def extra_state(self) -> StateDict:
        """This cursor's own fields for `state` (none by default)."""
        return {}

    def close(self) -> None:
        self.source.close()


def sub_state(state: Mapping[str, Any] | None, key: str) -> StateDict | None:
    """``state[key]`` or None when starting fresh."""
    return None if state is None else dict(state[key])
