"""Cursors: the runtime of one pass over a DataPipe, and the blocking iterator over them.

A `Cursor` is created by a node's ``_make_cursor(state)`` at the first pull of a pass and
holds everything that changes while iterating (positions, buffers, RNG state, handles of
threads or processes); the node itself keeps only its configuration. ``state()`` returns a
`StateDict` from which ``_make_cursor(state)`` continues after the last item returned.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from conveyor.engine.channel import NotAvailable

if TYPE_CHECKING:
    from conveyor.datapipes.base import IterDataPipe

__all__ = [
    "BlockingIterator",
    "Cursor",
    "FRESH_STATE",
    "GeneratorCursor",
    "SourceCursor",
    "StateDict",
    "check_version",
    "sub_state",
]

T_co = TypeVar("T_co", covariant=True)

StateDict = dict[str, Any]
"""A node's state: a small dict with an int ``"version"`` key, nesting its inputs' states."""

FRESH_STATE: StateDict = {"version": 1, "fresh": True}
"""The state of a pipe that has not started a pass (loading it means: start fresh)."""

_WAIT_SLICE_S = 1.0  # re-poll at least this often, in case a producer died without ringing


def check_version(state: Mapping[str, Any], expected: int, who: str) -> None:
    """Raise a clear `ValueError` unless ``state`` is a dict of version ``expected``."""
    version = state.get("version") if isinstance(state, Mapping) else None
    if version != expected:
        raise ValueError(
            f"{who}: cannot load state with version {version!r} (expected {expected}); "
            "pass a state_dict() taken from the same pipeline and conveyor version"
        )


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


class SourceCursor(Cursor[T_co]):
    """A cursor reading one input: restarts it, nests its state under ``"source"``, closes it.

    Subclasses add their own fields through ``extra_state()`` and read them back from the
    ``state`` given to ``__init__`` (already version-checked here).
    """

    version: ClassVar[int] = 1

    def __init__(self, source: IterDataPipe[Any], state: StateDict | None, who: str) -> None:
        if state is not None:
            check_version(state, self.version, who)
        self.source = source
        source._restart(sub_state(state, "source"))

    def state(self) -> StateDict:
        return {"version": self.version, "source": self.source.state_dict(), **self.extra_state()}

    def extra_state(self) -> StateDict:
        """This cursor's own fields for `state` (none by default)."""
        return {}

    def close(self) -> None:
        self.source.close()


class GeneratorCursor(Cursor[T_co]):
    """Pulls a torch-style subclass through its ``__iter__`` generator; replays on restore."""

    def __init__(self, node: IterDataPipe[T_co], state: StateDict | None) -> None:
        node.reset()  # torch calls the user's reset() before each __iter__
        iter_fn = type(node)._iter_fn
        assert iter_fn is not None
        produced = iter_fn(node)
        self._it: Iterator[T_co] = _NextCaller(node) if produced is node else iter(produced)
        self._yielded = 0
        if state is not None:
            check_version(state, 1, type(node).__name__)
            for _ in range(int(state["yielded"])):
                next(self._it)
                self._yielded += 1

    def next(self) -> T_co:
        value = next(self._it)
        self._yielded += 1
        return value

    def state(self) -> StateDict:
        return {"version": 1, "yielded": self._yielded}

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if callable(close):
            close()


class _NextCaller(Iterator[T_co]):
    """For subclasses whose ``__iter__`` returns ``self`` and that define ``__next__``."""

    def __init__(self, node: IterDataPipe[T_co]) -> None:
        self._node = node

    def __next__(self) -> T_co:
        value: T_co = type(self._node).__next__(self._node)  # type: ignore[attr-defined]
        return value


class BlockingIterator(Iterator[T_co]):
    """What ``iter(pipe)`` returns: waits while the pipe says `NotAvailable`."""

    def __init__(self, pipe: IterDataPipe[T_co], iterator_id: int) -> None:
        self._pipe: IterDataPipe[T_co] | None = pipe
        self._id = iterator_id

    def __iter__(self) -> BlockingIterator[T_co]:
        return self

    def __next__(self) -> T_co:
        pipe = self._pipe
        if pipe is None:
            raise StopIteration
        if pipe._iterator_id != self._id:
            raise RuntimeError(
                "This iterator has been invalidated because another iterator has been created "
                f"from the same IterDataPipe: {pipe!r}. Use .fork() to read a pipe twice."
            )
        attempt = 0
        while True:
            try:
                item = pipe.nonblocking_next()
            except NotAvailable as pending:
                pending.wait(_WAIT_SLICE_S, attempt)
                attempt += 1
                continue
            pipe._number_of_samples_yielded += 1  # torch's count for this iterator
            return item

    def close(self) -> None:
        """Close the pipe's run (threads, processes) if this is still its iterator."""
        pipe, self._pipe = self._pipe, None
        if pipe is not None and pipe._iterator_id == self._id:
            pipe._park()

    def __del__(self) -> None:
        self.close()


def sub_state(state: Mapping[str, Any] | None, key: str) -> StateDict | None:
    """``state[key]`` or None when starting fresh."""
    return None if state is None else dict(state[key])
