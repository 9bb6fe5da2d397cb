"""Progress through several named streams at once, resumable on any topology.

A consumer that reads several sources (`conveyor.text.PackedText`: one stream of units per
source, mixed) checkpoints one elastic progress per source (`conveyor.state.elastic`)
side by side, plus what the sources share (a mixture's weights):

    {"elastic": 1, "identity": str, "streams": {name: [units, below, done, partial,
     index, offset]}, "consumers": n, "consumer": c, "shared": {...}}

A merged progress (no ``consumers``) has ``[units, below, done, partial]`` per stream.
`merge_any` is what the loader calls on its workers' (and ranks') checkpoints: this shape
is merged stream by stream, every other elastic progress as before. Of the ``shared``
parts, the one with the highest ``"control"`` (the newest change the main process sent)
is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.state.elastic import ELASTIC_VERSION, Progress, check_progress, merge

__all__ = [
    "check_stream_set",
    "is_stream_set",
    "merge_any",
    "merge_stream_set",
    "stream_progress",
]


def is_stream_set(state: object) -> bool:
    return (
        isinstance(state, Mapping)
        and state.get("elastic") == ELASTIC_VERSION
        and ("streams" in state)
    )


def check_stream_set(state: Mapping[str, Any]) -> None:
    """TypeError / ValueError naming the field when a stream set is damaged: each stream's
    entry is checked as the elastic progress it stands for, its values as they are (no
    conversion that would let a float or a string pass as a count)."""
    streams = state.get("streams")
    if not isinstance(streams, Mapping) or not streams:
        raise TypeError("progress field streams is no dict of named streams")
    width = 6 if "consumers" in state else 4
    for name, entry in streams.items():
        where = f"streams[{name!r}]"
        if not isinstance(name, str):
            raise TypeError(f"progress field {where}: a stream's name is no str")
        if not isinstance(entry, list) or len(entry) != width:
            raise ValueError(f"progress field {where} is no list of {width} values")
        progress: dict[str, Any] = {
            "elastic": ELASTIC_VERSION,
            "identity": {"units": entry[0]},
            "below": entry[1],
            "done": entry[2],
            "partial": entry[3],
        }
        if width == 6:
            progress.update(
                consumers=state["consumers"],
                consumer=state.get("consumer"),
                index=entry[4],
                offset=entry[5],
            )
        try:
            check_progress(progress)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{where}: {error}") from None
    shared = state.get("shared")
    if shared is not None and not isinstance(shared, Mapping):
        raise TypeError("progress field shared is no dict")


def merge_any(states: Sequence[Mapping[str, Any] | None]) -> Any:
    """One progress from the checkpoints of every consumer of one split (see `merge`)."""
    if any(is_stream_set(state) for state in states if state is not None):
        return merge_stream_set(states)
    return merge(states)


def stream_progress(state: Mapping[str, Any], name: str) -> dict[str, Any]:
    """One stream's part of ``state`` as an elastic (consumer) progress."""
    entry = state["streams"][name]
    progress: dict[str, Any] = {
        "elastic": ELASTIC_VERSION,
        "identity": {"units": int(entry[0])},
        "below": int(entry[1]),
        "done": list(entry[2]),
        "partial": [list(pair) for pair in entry[3]],
    }
    if "consumers" in state:
        progress.update(
            consumers=int(state["consumers"]),
            consumer=int(state["consumer"]),
            index=int(entry[4]),
            offset=int(entry[5]),
        )
    return progress


def merge_stream_set(states: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Merge stream by stream; None when no consumer has a state."""
    present = [state for state in states if state is not None]
    if not present:
        return None
    first = present[0]
    for other in present[1:]:
        if other.get("identity") != first.get("identity") or set(other["streams"]) != set(
            first["streams"]
        ):
            raise ValueError(
                "merge: these checkpoints are of different sources (identity "
                f"{first.get('identity')!r} != {other.get('identity')!r})"
            )
    streams: dict[str, list[Any]] = {}
    for name, entry in first["streams"].items():
        parts = [None if s is None else stream_progress(s, name) for s in states]
        merged: Progress | None = merge(parts)
        assert merged is not None
        streams[name] = [int(entry[0]), merged["below"], merged["done"], merged["partial"]]
    newest = max(present, key=lambda s: int(s.get("shared", {}).get("control", 0)))
    return {
        "elastic": ELASTIC_VERSION,
        "identity": first.get("identity"),
        "streams": streams,
        "shared": dict(newest.get("shared", {})),
    }
