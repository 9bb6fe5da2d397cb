"""torchdata 0.11's StatefulDataLoader state layout: written beside conveyor's, and read.

torchdata's keys (single process): ``_index_sampler_state``, ``_sampler_iter_state``,
``_sampler_iter_yielded``, ``_num_yielded``, ``_IterableDataset_len_called``,
``_shared_seed``, ``fetcher_state``, ``dataset_state``, ``_iterator_finished``; with workers
the same main-process state sits under ``_snapshot["_main_snapshot"]`` with the step count
in ``_snapshot["_snapshot_step"]`` and ``_steps_since_snapshot``. torchdata's shuffling
sampler keeps the generator state of the epoch's start in
``_sampler_iter_state["sampler_iter_state"]["generator"]``, which is all conveyor needs to
replay a map-style epoch and skip what was delivered.
"""

from __future__ import annotations

import base64
import pickle
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from conveyor.state import stream_state
from conveyor.state.loader_state import STATE_VERSION, LoaderStateDict
from conveyor.stateful_dataloader.sampler import RandomSampler

__all__ = ["CONVEYOR_KEY", "from_json", "from_torchdata", "to_json", "torchdata_view"]

CONVEYOR_KEY = "_conveyor"
_TENSOR = "__tensor__"
_BYTES = "__bytes__"
_SCALARS = frozenset({int, float, str, bool, type(None)})


class _TensorLists:
    """The list form of the few tensors a checkpoint repeats (an epoch's generator state,
    5,056 bytes, in every step's state): converted once, copied after."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[weakref.ref[torch.Tensor], int, list[Any]]] = {}

    def of(self, tensor: torch.Tensor) -> Any:
        """``tensor.tolist()``: a fresh list each call (the caller may change it)."""
        if tensor.dim() != 1:
            return tensor.tolist()  # a number (0-d), or nested lists: converted each time
        key = id(tensor)
        hit = self._cache.get(key)
        if hit is not None and hit[0]() is tensor and hit[1] == tensor._version:
            return list(hit[2])
        values: list[Any] = tensor.tolist()
        if len(self._cache) >= 16:
            self._cache.clear()
        self._cache[key] = (weakref.ref(tensor), tensor._version, values)
        return list(values)


_tensor_lists = _TensorLists()


def to_json(value: Any) -> Any:
    """``value`` with tensors and bytes spelled in JSON types (reversible by `from_json`)."""
    if isinstance(value, torch.Tensor):
        return {_TENSOR: _tensor_lists.of(value), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, bytes):
        return {_BYTES: base64.b64encode(value).decode("ascii")}
    if isinstance(value, Mapping):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        if all(type(item) in _SCALARS for item in value):
            return list(value)  # e.g. a generator's state as 5,056 ints: no call per item
        return [to_json(item) for item in value]
    return value


def from_json(value: Any) -> Any:
    if isinstance(value, Mapping):
        if _TENSOR in value:
            return torch.tensor(value[_TENSOR], dtype=getattr(torch, value["dtype"]))
        if _BYTES in value:
            return base64.b64decode(value[_BYTES])
        return {key: from_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def _state_of(sampler: object) -> Any:
    state_dict = getattr(sampler, "state_dict", None)
    return state_dict() if callable(state_dict) else None


def torchdata_view(
    ours: LoaderStateDict, index_sampler: object, num_workers: int, iterable_style: bool
) -> dict[str, Any]:
    """torchdata's keys for conveyor's state (what frameworks and users' tests read).

    Read-only: resuming goes through conveyor's own state. With workers, torchdata's
    ``_snapshot`` holds each worker's dataset and iterator state; the single-process keys
    stay at the top too (accelerate adjusts ``_num_yielded`` there), except
    ``dataset_state`` and ``fetcher_state``, whose presence tells torchdata's readers
    that there are no workers.
    """
    yielded = int(ours.get("yielded", 0)) if ours.get("in_epoch") else 0
    sampler_state = _state_of(index_sampler) if ours.get("in_epoch") else None
    view: dict[str, Any] = {
        "_index_sampler_state": sampler_state,
        "_sampler_iter_state": None,
        "_sampler_iter_yielded": yielded,
        "_num_yielded": yielded,
        "_IterableDataset_len_called": None,
        "_shared_seed": ours.get("shared_seed"),
        "_iterator_finished": not ours.get("in_epoch", False),
    }
    if not num_workers:
        dataset_state, iterator_state = stream_state.parts(ours.get("dataset"))
        view["dataset_state"] = dataset_state
        view["fetcher_state"] = _fetcher_state(iterable_style, iterator_state, ended=False)
        return view
    view["_num_workers"] = num_workers
    main = {key: view[key] for key in _MAIN_KEYS}
    main.update(_num_workers=num_workers, _base_seed=ours.get("base_seed"))
    view["_snapshot"] = {
        "_snapshot_step": yielded,
        "_last_yielded_worker_id": _last_worker(ours, num_workers),
        "_main_snapshot": main,
        "_worker_snapshots": _worker_snapshots(ours, num_workers, iterable_style),
    }
    view["_steps_since_snapshot"] = 0
    return view


_MAIN_KEYS = (
    "_sampler_iter_state",
    "_index_sampler_state",
    "_sampler_iter_yielded",
    "_IterableDataset_len_called",
    "_shared_seed",
)


def _fetcher_state(iterable_style: bool, iterator_state: Any, ended: bool) -> Any:
    if not iterable_style:
        return None
    return {"dataset_iter_state": iterator_state, "fetcher_ended": ended}


def _last_worker(ours: LoaderStateDict, num_workers: int) -> int:
    workers = ours.get("workers")
    if workers:
        return (int(workers["next_worker"]) - 1) % num_workers
    return (int(ours.get("yielded", 0)) - 1) % num_workers


def _worker_snapshots(
    ours: LoaderStateDict, num_workers: int, iterable_style: bool
) -> dict[str, Any]:
    workers = ours.get("workers")
    snapshots: dict[str, Any] = {}
    for worker_id in range(num_workers):
        blob = workers["states"][worker_id] if workers else None
        ended = not workers["active"][worker_id] if workers else False
        dataset_state, iterator_state = stream_state.parts(
            None if blob is None else pickle.loads(blob)
        )
        snapshots[f"worker_{worker_id}"] = {
            "worker_id": worker_id,
            "dataset_state": dataset_state,
            "fetcher_state": _fetcher_state(iterable_style, iterator_state, ended),
        }
    return snapshots


def from_torchdata(state: Mapping[str, Any], loader: Any) -> LoaderStateDict:
    """conveyor's state for a checkpoint torchdata 0.11 wrote (map-style datasets)."""
    snapshot = state.get("_snapshot")
    if snapshot is not None:
        main = snapshot["_main_snapshot"]
        yielded = int(snapshot["_snapshot_step"]) + int(state.get("_steps_since_snapshot", 0))
    elif "_num_yielded" in state:
        main, yielded = state, int(state["_num_yielded"])
    else:
        raise ValueError(
            "StatefulDataLoader.load_state_dict: not a state of conveyor's or torchdata's "
            f"StatefulDataLoader (keys: {sorted(state)})"
        )
    if loader._conveyor_options.data.iterable_style:
        raise ValueError(
            "this checkpoint was written by torchdata for an iterable-style dataset; its "
            "worker and dataset states are torchdata's private format, which conveyor cannot "
            "resume exactly. Restart the epoch, or resume from a conveyor checkpoint."
        )
    epoch_generator = _epoch_start_generator(main.get("_sampler_iter_state"))
    _check_sampler(loader, epoch_generator)
    finished = bool(state.get("_iterator_finished", main.get("_iterator_finished", False)))
    if finished:
        _finish_epoch(loader, epoch_generator)
        return {"version": STATE_VERSION, "in_epoch": False, "generator": None}
    resumed: LoaderStateDict = {
        "version": STATE_VERSION,
        "in_epoch": True,
        "generator": None,
        "global_rng": None,
        "sampler": _batch_sampler_start(epoch_generator),
        "drew_base_seed": "_base_seed" not in main,
        "shared_seed": main.get("_shared_seed"),
        "yielded": yielded,
        "delivered_ahead": [],
        "dataset": None,
        "workers": None,
    }
    if "_base_seed" in main:
        resumed["base_seed"] = int(main["_base_seed"])
    return resumed


def _epoch_start_generator(sampler_iter_state: Any) -> torch.Tensor | None:
    if not isinstance(sampler_iter_state, Mapping):
        return None
    inner = sampler_iter_state.get("sampler_iter_state")
    if not isinstance(inner, Mapping) or "generator" not in inner:
        return None
    saved = inner["generator"]
    return saved if isinstance(saved, torch.Tensor) else torch.tensor(saved, dtype=torch.uint8)


def _check_sampler(loader: Any, epoch_generator: torch.Tensor | None) -> None:
    if epoch_generator is not None and not isinstance(loader.sampler, RandomSampler):
        raise ValueError(
            "this torchdata checkpoint shuffled with torchdata's RandomSampler; resume it with "
            "a StatefulDataLoader built with shuffle=True and no sampler (the same as torchdata "
            f"used), not with a {type(loader.sampler).__name__}"
        )


def _batch_sampler_start(epoch_generator: torch.Tensor | None) -> Any:
    """The stateful BatchSampler's state at the epoch's start (its sampler not yet drawn)."""
    if epoch_generator is None:
        return None
    return {"samples_yielded": 0, "sampler_state": {"yielded": 0, "generator": epoch_generator}}


def _finish_epoch(loader: Any, epoch_generator: torch.Tensor | None) -> None:
    """Leave the shuffling generator where torchdata's was after the checkpointed epoch."""
    if epoch_generator is None:
        return
    loader.sampler.load_state_dict({"yielded": 0, "generator": epoch_generator})
    for _ in loader.sampler:
        pass
