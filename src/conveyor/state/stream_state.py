"""A stream's checkpoint: the dataset's state, its iterator's, and which to load when.

torchdata's rule, which users' datasets are written against: the dataset's state is
loaded *before* ``iter(dataset)`` and the iterator's state *after* it. A dataset that is
its own iterator (``__iter__`` resets it and returns ``self``) is an iterator: its state
goes in after ``iter()``, or the reset would undo it.

The common case (a dataset with state whose ``__iter__`` returns a stateless generator)
stays the dataset's own ``state_dict()``, unwrapped: elastic resume (`conveyor.state.elastic`)
reads and merges exactly that. The two other cases are marked dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conveyor.state.protocol import has_state

__all__ = [
    "can_restore",
    "capture",
    "load_after_iter",
    "load_before_iter",
    "next_epoch_part",
    "parts",
    "restore",
]

_KIND = "__conveyor_stream__"
_SELF = "dataset_is_iterator"
_BOTH = "dataset_and_iterator"
_ENDED = "epoch_ended"  # a state at the end of an epoch: loaded, then the next pass begins


def capture(dataset: Any, iterator: Any) -> Any:
    """The state of a stream over ``dataset`` read through ``iterator`` (None: not begun)."""
    if iterator is dataset:
        return {_KIND: _SELF, "iterator": dataset.state_dict()} if has_state(dataset) else None
    dataset_state = dataset.state_dict() if has_state(dataset) else None
    if iterator is None or not has_state(iterator):
        return dataset_state
    return {_KIND: _BOTH, "dataset": dataset_state, "iterator": iterator.state_dict()}


def _marked(state: Any) -> str | None:
    return state.get(_KIND) if isinstance(state, Mapping) else None


def can_restore(dataset: Any, state: Any) -> bool:
    """Whether ``state`` can be loaded here (False: a state-less dataset; replay instead)."""
    if state is None:
        return False
    return _marked(state) is not None or has_state(dataset)


def restore(dataset: Any, state: Any) -> Any:
    """Load ``state`` into ``dataset``; returns the resumed ``iter(dataset)``, or None when
    the first pull is to call it (no iterator state, or a state taken at the end of an
    epoch, whose iterator was only there to be loaded)."""
    ended = _ended(state)
    inner = state if ended is None else ended
    iterator_state = load_before_iter(dataset, inner)
    iterator = None
    if iterator_state is not None:
        iterator = iter(dataset)
        load_after_iter(iterator, iterator_state)
    return None if ended is not None else iterator


def load_before_iter(dataset: Any, state: Any) -> Any:
    """Load what goes in before ``iter(dataset)``; returns the iterator's part (or None)."""
    kind = _marked(state)
    if kind is None:
        if state is not None and has_state(dataset):
            dataset.load_state_dict(state)
        return None
    if kind == _BOTH and state["dataset"] is not None and has_state(dataset):
        dataset.load_state_dict(state["dataset"])
    return state["iterator"]


def load_after_iter(iterator: Any, iterator_state: Any) -> None:
    if iterator_state is not None and has_state(iterator):
        iterator.load_state_dict(iterator_state)


def next_epoch_part(dataset: Any, state: Any) -> Any:
    """A stream's state at the end of an epoch, as the next epoch starts from it.

    torchdata's order, which users' datasets are written against: the whole state is
    loaded (the dataset's part, ``iter()``, the iterator's part: an RNG the iterator
    restores, say), then that iterator is dropped and the next epoch calls ``iter()`` anew.
    Nothing for a dataset whose state is only where its current pass is
    (``restarts_each_pass``: DataPipes, `ShardedStream`): its next pass starts afresh.
    """
    if state is None or getattr(dataset, "restarts_each_pass", False):
        return None
    return {_KIND: _ENDED, "state": state}


def _ended(state: Any) -> Any:
    """The state inside an end-of-epoch marker, or None if ``state`` is not one."""
    return state["state"] if _marked(state) == _ENDED else None


def parts(state: Any) -> tuple[Any, Any]:
    """(dataset state, iterator state) as torchdata lays them out in its checkpoints."""
    ended = _ended(state)
    if ended is not None:
        return parts(ended)
    kind = _marked(state)
    if kind is None:
        return state, None
    if kind == _SELF:
        return None, state["iterator"]
    return state["dataset"], state["iterator"]
