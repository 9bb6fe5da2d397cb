"""The checks a DataLoader checkpoint passes on both sides: at save and at load.

Save: ``state_dict()`` hands out plain data only (`conveyor.state.plain`). A dataset or
sampler whose own ``state_dict()`` is not plain is a `TypeError` *now*, naming its class,
the key path inside its state and the type: never a checkpoint that fails, or runs code,
when it is resumed. Load: a checkpoint that is not plain data is refused before any of it
is used (a `TypeError` naming the field), so nothing that could run code when pickled to a
worker ever reaches one.
"""

from __future__ import annotations

from typing import Any, TypeVar

from conveyor.state.plain import NotPlainData, Path, RefusedState, check_plain, save_error

__all__ = ["check_loadable", "checked_for_save"]

S = TypeVar("S", bound=Any)


def checked_for_save(state: S, dataset: object, sampler: object) -> S:
    """``state`` itself if it is plain data; the `TypeError` of its owner otherwise."""
    refused = state.get("dataset")
    if isinstance(refused, RefusedState):  # taken in this process (no workers)
        raise save_error(_name(dataset), refused.path, refused.kind, refused.why)
    workers = state.get("workers")
    if workers:
        for worker_id, saved in enumerate(workers["states"]):
            if isinstance(saved, RefusedState):
                owner = f"{_name(dataset)} (in worker {worker_id})"
                raise save_error(owner, saved.path, saved.kind, saved.why)
    try:
        check_plain(state)
    except NotPlainData as error:
        owner, inner = _owner(error.path, dataset, sampler)
        raise save_error(owner, inner, error.kind, error.why) from None
    return state


def _owner(path: Path, dataset: object, sampler: object) -> tuple[str, Path]:
    """Whose ``state_dict()`` a path of the loader's state is in, and the path inside it."""
    head = path[0] if path else None
    if head == "workers" and len(path) >= 3 and path[1] == "states":
        return f"{_name(dataset)} (in worker {path[2]})", path[3:]
    if head in ("dataset", "elastic"):
        return _name(dataset), path[1:]
    if head == "sampler":
        return _name(sampler), path[1:]
    return "the DataLoader (conveyor's own state: please report this)", path


def _name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def check_loadable(state: Any) -> None:
    """TypeError naming the field when a checkpoint holds anything but plain data."""
    try:
        check_plain(state)
    except NotPlainData as error:
        raise TypeError(
            f"DataLoader.load_state_dict: this checkpoint is not plain data: {error}. A "
            "conveyor checkpoint never holds objects or pickles; was it changed, or written "
            "by another library?"
        ) from None
