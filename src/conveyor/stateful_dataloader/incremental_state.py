"""torchdata's ``stateful_dataloader.incremental_state``: state dicts sent as deltas.

A nested state dict is kept flat (``{("a", "b"): leaf}``); a delta holds the leaves that
changed and a `_Tombstone` for each one that went away, so a receiver applying the deltas
in order ends with the sender's state. conveyor's own loader does not need this (its
checkpoints are a few counters), but code written against torchdata imports it.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "_DATASET_ITER_STATE",
    "_DATASET_STATE",
    "_FETCHER_ENDED",
    "_FETCHER_STATE",
    "_WORKER_ID",
    "_IncrementalState",
    "_IncrementalWorkerState",
    "_Tombstone",
    "_flatten",
    "_unflatten",
]

_WORKER_ID = "worker_id"
_FETCHER_STATE = "fetcher_state"
_FETCHER_ENDED = "fetcher_ended"
_DATASET_STATE = "dataset_state"
_DATASET_ITER_STATE = "dataset_iter_state"

FlatState = dict[tuple[Any, ...], Any]


class _Tombstone:
    """In a delta: this key was removed."""

    def __repr__(self) -> str:
        return "_Tombstone()"


def _flatten(data: Any, prefix: tuple[Any, ...] = ()) -> FlatState:
    """``{path: leaf}``; a leaf is anything but a non-empty dict (``None`` included)."""
    if not isinstance(data, dict) or not data:
        return {prefix: data}
    flat: FlatState = {}
    for key, value in data.items():
        flat.update(_flatten(value, (*prefix, key)))
    return flat


def _unflatten(flat: FlatState) -> Any:
    """The nested value `_flatten` was given."""
    if () in flat:
        return flat[()]
    nested: dict[Any, Any] = {}
    for path, value in flat.items():
        node = nested
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return nested


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, torch.Tensor) or isinstance(new, torch.Tensor):
        return (
            isinstance(old, torch.Tensor)
            and isinstance(new, torch.Tensor)
            and old.shape == new.shape
            and bool(torch.equal(old, new))
        )
    try:
        return bool(old == new) and type(old) is type(new)
    except Exception:
        return old is new


class _IncrementalState:
    """The receiver's copy of one state, kept flat, updated by deltas."""

    def __init__(self, state: Any) -> None:
        self._flat = _flatten(state)

    def generate_delta(self, new_state: Any) -> FlatState:
        """What changed since the last state (which ``new_state`` then becomes)."""
        new_flat = _flatten(new_state)
        delta: FlatState = {
            path: value
            for path, value in new_flat.items()
            if path not in self._flat or not _same(self._flat[path], value)
        }
        delta.update({path: _Tombstone() for path in self._flat if path not in new_flat})
        self._flat = new_flat
        return delta

    def apply_delta(self, delta: FlatState) -> None:
        for path, value in delta.items():
            if isinstance(value, _Tombstone):
                self._flat.pop(path, None)
            else:
                self._flat[path] = value

    def get_state(self) -> Any:
        return _unflatten(self._flat)


class _IncrementalWorkerState:
    """A worker's state (dataset state, and its iterator's state) sent as deltas."""

    def __init__(self, state: dict[str, Any] | None) -> None:
        self._worker_id: Any = None
        self._dataset: _IncrementalState | None = None
        self._iterator: _IncrementalState | None = None
        self._ended: Any = False
        if state is not None:
            self.generate_delta(state)

    @staticmethod
    def _delta(tracker: _IncrementalState | None, value: Any) -> tuple[Any, Any]:
        if value is None:
            return None, None
        if tracker is None:
            tracker = _IncrementalState(None)
        return tracker, tracker.generate_delta(value)

    def generate_delta(self, state: dict[str, Any]) -> dict[str, Any]:
        fetcher = state[_FETCHER_STATE]
        self._worker_id = state[_WORKER_ID]
        self._ended = fetcher[_FETCHER_ENDED]
        self._dataset, dataset_delta = self._delta(self._dataset, state[_DATASET_STATE])
        self._iterator, iter_delta = self._delta(self._iterator, fetcher[_DATASET_ITER_STATE])
        return {
            _WORKER_ID: self._worker_id,
            _DATASET_STATE: dataset_delta,
            _FETCHER_STATE: {_DATASET_ITER_STATE: iter_delta, _FETCHER_ENDED: self._ended},
        }

    def get_state(self) -> dict[str, Any]:
        return {
            _WORKER_ID: self._worker_id,
            _DATASET_STATE: None if self._dataset is None else self._dataset.get_state(),
            _FETCHER_STATE: {
                _DATASET_ITER_STATE: None if self._iterator is None else self._iterator.get_state(),
                _FETCHER_ENDED: self._ended,
            },
        }
