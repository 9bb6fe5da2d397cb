"""What a checkpoint depends on, recorded with it and checked when it is loaded.

A checkpoint says "these samples of this epoch were delivered". That only means something
for the same data read in the same order: another dataset length, another kind of dataset
or another sampler would make the loader skip or repeat samples without a word. So each
checkpoint carries a small fingerprint of the loader that took it, and loading it into a
loader whose fingerprint differs in one of those fields raises a `ValueError` naming the
field, the saved value and the current one. A change of ``batch_size`` (or ``drop_last``)
is not in that list: resume counts samples, so the rest of the epoch is re-batched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

__all__ = [
    "Fingerprint",
    "check_fingerprint",
    "check_state_keys",
    "fingerprint_of",
    "loader_fingerprint",
]


class Fingerprint(TypedDict):
    dataset: str  # "map" or "iterable"
    length: int | None  # len(dataset) of a map-style dataset
    sampler: str | None  # the per-sample sampler's class (shuffle or not, distributed, ...)
    batch_sampler: str | None  # the batch sampler's class; None without batching
    batch_size: int | None  # None: no batching, or a batch_sampler of the user's
    drop_last: bool
    identity: str | None  # a stream's ``checkpoint_identity()``: which data (its shards)


# Fields whose change cannot be honoured, with what the user should do instead.
_MUST_MATCH = {
    "dataset": "resume with the same kind of dataset",
    "length": "resume over the same dataset (its length changed: samples would be skipped "
    "or repeated)",
    "sampler": "resume with the same sampler (shuffle on or off, the same sampler class)",
    "batch_sampler": "resume with the same batch_sampler",
    "identity": "resume over the same data (this is another stream's checkpoint: other "
    "shards, or another order of them)",
}

_REQUIRED_IN_EPOCH = ("version", "in_epoch", "yielded")


def _class_name(value: object) -> str | None:
    if value is None:
        return None
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _length(dataset: object) -> int | None:
    try:
        return len(dataset)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return None


def loader_fingerprint(
    dataset: object,
    iterable_style: bool,
    sampler: object,
    batch_sampler: object,
    batch_size: int | None,
    drop_last: bool,
) -> Fingerprint:
    """The fingerprint of a loader over ``dataset`` (cheap: a ``len`` and class names)."""
    return {
        "dataset": "iterable" if iterable_style else "map",
        "length": None if iterable_style else _length(dataset),
        "sampler": None if iterable_style else _class_name(sampler),
        "batch_sampler": None if iterable_style else _class_name(batch_sampler),
        "batch_size": batch_size,
        "drop_last": drop_last,
        "identity": _identity(dataset) if iterable_style else None,
    }


def _identity(dataset: object) -> str | None:
    """``dataset.checkpoint_identity()`` (cheap: a digest of its shard names), if it has one."""
    identify = getattr(dataset, "checkpoint_identity", None)
    return identify() if callable(identify) else None


def fingerprint_of(data: Any) -> Fingerprint:
    """`loader_fingerprint` of a loader's ``DataOptions`` (``conveyor.engine.loop.options``)."""
    return loader_fingerprint(
        data.dataset,
        data.iterable_style,
        data.sampler,
        data.batch_sampler,
        data.batch_size,
        data.drop_last,
    )


def check_fingerprint(saved: Mapping[str, Any] | None, current: Fingerprint) -> None:
    """Raise ValueError when the checkpoint's loader differs in a field that matters.

    ``saved`` None: a checkpoint from before fingerprints existed, accepted as it is.
    """
    if saved is None:
        return
    for field, advice in _MUST_MATCH.items():
        if field not in saved:
            continue
        before, now = saved[field], current[field]  # type: ignore[literal-required]
        if before is None or now is None or before == now:
            continue
        raise ValueError(
            f"this checkpoint cannot be resumed here: it was taken with {field}={before!r}, "
            f"this loader has {field}={now!r}; {advice}"
        )


def check_state_keys(state: object) -> None:
    """A clear error for what is not a conveyor DataLoader checkpoint (None, a dict with
    keys missing), before any of it is used."""
    if not isinstance(state, Mapping):
        raise TypeError(
            "DataLoader.load_state_dict expects the dict that DataLoader.state_dict() "
            f"returned, got {type(state).__name__}"
        )
    if not state.get("in_epoch"):
        return
    missing = [key for key in _REQUIRED_IN_EPOCH if key not in state]
    if missing:
        raise ValueError(
            f"this DataLoader checkpoint is incomplete: it lacks {', '.join(missing)} "
            f"(it has {', '.join(sorted(map(str, state))) or 'nothing'}); pass the whole "
            "dict that state_dict() returned"
        )
