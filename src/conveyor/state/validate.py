"""A loaded checkpoint's fields checked in the main process, before any of it is used.

A checkpoint may be damaged (truncated, edited, a counter gone negative or huge, keys
missing or added) or another loader's. Each is a `TypeError` (a field of the wrong type)
or `ValueError` (a value out of range, keys that do not belong, lists that do not agree)
naming the field, raised by ``load_state_dict()``: never a crash inside a worker, never a
hang, never an epoch silently resumed at the wrong place. Elastic progress (of
`ShardedStream`, `TarShards`, a merged checkpoint) is checked the same way
(`conveyor.state.elastic.check_progress`); a dataset's own state is its own to check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from conveyor.state.certificate import Certificate
from conveyor.state.elastic import check_progress, is_elastic
from conveyor.state.stream_set import check_stream_set, is_stream_set

__all__ = ["check_loader_state"]

_MAX_COUNT = 2**53  # no epoch has more batches, samples or positions than this

Check = Callable[[Any, str], None]


def _kind(value: Any, path: str, *kinds: type, nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if type(value) not in kinds:
        names = " or ".join(k.__name__ for k in kinds) + (" or None" if nullable else "")
        raise TypeError(
            f"DataLoader.load_state_dict: checkpoint field {path} is a {type(value).__name__}, "
            f"expected {names}"
        )


def _count(value: Any, path: str, nullable: bool = False) -> None:
    """A non-negative int below `_MAX_COUNT` (None if ``nullable``)."""
    _kind(value, path, int, nullable=nullable)
    if value is not None and not 0 <= value < _MAX_COUNT:
        raise ValueError(
            f"DataLoader.load_state_dict: checkpoint field {path}={value} is out of range"
        )


def _seed(value: Any, path: str) -> None:
    _kind(value, path, int, nullable=True)
    if value is not None and not -(2**63) <= value < 2**64:
        raise ValueError(
            f"DataLoader.load_state_dict: checkpoint field {path}={value} is no 64-bit seed"
        )


def _rng(value: Any, path: str) -> None:
    _kind(value, path, torch.Tensor, nullable=True)
    if value is not None and (value.dtype != torch.uint8 or value.dim() != 1):
        raise ValueError(
            f"DataLoader.load_state_dict: checkpoint field {path} is no generator state "
            f"(a 1-D uint8 tensor), got {value.dtype} of shape {tuple(value.shape)}"
        )


def _flag(value: Any, path: str) -> None:
    _kind(value, path, bool)


def _mapping(value: Any, path: str) -> None:
    _kind(value, path, dict, nullable=True)


def _anything(value: Any, path: str) -> None:
    """Checked by its owner (a sampler's or dataset's own state)."""


def _counts(value: Any, path: str, length: int | None = None) -> None:
    _kind(value, path, list)
    if length is not None and len(value) != length:
        raise ValueError(
            f"DataLoader.load_state_dict: checkpoint field {path} has {len(value)} entries, "
            f"expected {length} (a truncated or edited checkpoint?)"
        )
    for index, item in enumerate(value):
        _count(item, f"{path}[{index}]")


def _workers(value: Any, path: str) -> None:
    if value is None:
        return
    _kind(value, path, dict)
    _keys(value, path, {"num_workers", "states", "counts", "active", "next_worker"})
    workers = value["num_workers"]
    _count(workers, f"{path}.num_workers")
    if workers < 1:
        raise ValueError(f"DataLoader.load_state_dict: {path}.num_workers={workers} is below 1")
    _kind(value["states"], f"{path}.states", list)
    if len(value["states"]) != workers:
        raise ValueError(
            f"DataLoader.load_state_dict: {path}.states has {len(value['states'])} entries "
            f"for num_workers={workers} (a truncated or edited checkpoint?)"
        )
    _counts(value["counts"], f"{path}.counts", workers)
    _kind(value["active"], f"{path}.active", list)
    if len(value["active"]) != workers:
        raise ValueError(f"DataLoader.load_state_dict: {path}.active has the wrong length")
    for index, flag in enumerate(value["active"]):
        _flag(flag, f"{path}.active[{index}]")
    _count(value["next_worker"], f"{path}.next_worker")
    if value["next_worker"] >= workers:
        raise ValueError(
            f"DataLoader.load_state_dict: {path}.next_worker={value['next_worker']} is no "
            f"worker of {workers}"
        )
    for index, saved in enumerate(value["states"]):
        if is_elastic(saved):
            _progress(saved, f"{path}.states[{index}]")


def _replicas(value: Any, path: str) -> None:
    if value is None:
        return
    _kind(value, path, dict)
    _keys(value, path, {"num_replicas", "epoch", "per_request", "consumed_before"})
    for key in ("num_replicas", "epoch", "per_request", "consumed_before"):
        _count(value[key], f"{path}.{key}")
    if value["num_replicas"] < 1 or value["per_request"] < 1:
        raise ValueError(f"DataLoader.load_state_dict: {path} has a count below 1")


def _topology(value: Any, path: str) -> None:
    if value is None:
        return
    _kind(value, path, dict)
    world, rank = value.get("world_size", 1), value.get("rank", 0)
    _count(world, f"{path}.world_size")
    _count(rank, f"{path}.rank")
    if not rank < world:
        raise ValueError(f"DataLoader.load_state_dict: {path}.rank={rank} is no rank of {world}")


def _progress(value: Any, path: str) -> None:
    """An elastic progress (a merged one, a Mixture's placed state is checked by Mixture)."""
    try:
        if is_stream_set(value):
            check_stream_set(value)  # several named streams (PackedText)
        else:
            check_progress(value)
    except (TypeError, ValueError) as error:
        raise type(error)(f"DataLoader.load_state_dict: checkpoint field {path}: {error}") from None


def _count_or_none(value: Any, path: str) -> None:
    _count(value, path, nullable=True)


def _count_list(value: Any, path: str) -> None:
    _counts(value, path)


def _placed_or_progress(value: Any, path: str) -> None:
    """A merged elastic progress, or a placed dataset's state (`Mixture` checks that)."""
    if is_elastic(value):
        _progress(value, path)
    else:
        _mapping(value, path)


def _certificate(value: Any, path: str) -> None:
    try:
        Certificate.from_state(value)
    except ValueError as error:
        raise ValueError(f"DataLoader.load_state_dict: {error}") from None


FIELDS: dict[str, Check] = {
    "version": _count,
    "in_epoch": _flag,
    "generator": _rng,
    "global_rng": _rng,
    "sampler": _anything,
    "drew_base_seed": _flag,
    "base_seed": _seed,
    "shared_seed": _seed,
    "yielded": _count,
    "delivered_ahead": _count_list,
    "dataset": _anything,
    "workers": _workers,
    "replicas": _replicas,
    "samples": _count_or_none,
    "rebatched": _flag,
    "fingerprint": _mapping,
    "topology": _topology,
    "elastic": _placed_or_progress,
    "certificate": _certificate,
    "epoch": _count,
}


def _keys(value: Mapping[str, Any], path: str, expected: set[str]) -> None:
    missing, extra = expected - set(value), set(value) - expected
    if missing or extra:
        raise ValueError(
            f"DataLoader.load_state_dict: checkpoint field {path} has keys missing "
            f"{sorted(missing)} / unknown {sorted(map(str, extra))}"
        )


def check_loader_state(state: Mapping[str, Any]) -> None:
    """Every field of a conveyor DataLoader checkpoint, and how they agree."""
    unknown = sorted(str(key) for key in state if key not in FIELDS)
    if unknown:
        raise ValueError(
            f"DataLoader.load_state_dict: unknown checkpoint field(s) {unknown}: not a conveyor "
            "DataLoader checkpoint (another library's, or edited?)"
        )
    for key, value in state.items():
        FIELDS[key](value, key)
    yielded = state.get("yielded", 0)
    ahead = state.get("delivered_ahead") or []
    if len(set(ahead)) != len(ahead) or any(position <= yielded for position in ahead):
        raise ValueError(
            "DataLoader.load_state_dict: checkpoint field delivered_ahead must list distinct "
            f"positions after yielded={yielded}"
        )
    workers = state.get("workers")
    if workers and sum(workers["counts"]) > yielded:
        raise ValueError(
            f"DataLoader.load_state_dict: checkpoint field workers.counts adds up to "
            f"{sum(workers['counts'])} batches, more than yielded={yielded}"
        )
