"""Version-1 checkpoints, whose workers' dataset states were pickles.

conveyor never unpickles checkpoint content: a pickle runs whatever code its author put in
it, and a checkpoint loaded "safely" with ``torch.load(weights_only=True)`` still carried
such blobs into ``load_state_dict()``. A version-1 checkpoint without pickles (map-style
loaders, streams whose datasets have no state) is read as it is; one with pickles is
refused with a `ValueError` that names the version and the way out below.

`unpickle_legacy_checkpoint` is that way out, and it is unsafe by design: call it only on
files you wrote yourself, once, and save what it returns.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Mapping
from typing import Any

__all__ = ["check_legacy", "unpickle_legacy_checkpoint"]

_BYTES = "__bytes__"  # how StatefulDataLoader's JSON layout spelled bytes
_CONVEYOR_KEY = "_conveyor"  # where StatefulDataLoader keeps conveyor's own state


def _blobs(state: Mapping[str, Any]) -> list[int]:
    """Indices of the workers whose state is a pickle (raw bytes or JSON-spelled)."""
    workers = state.get("workers")
    if not isinstance(workers, Mapping) or not isinstance(workers.get("states"), list):
        return []
    return [i for i, blob in enumerate(workers["states"]) if _is_blob(blob)]


def _is_blob(value: Any) -> bool:
    if isinstance(value, bytes | bytearray):
        return True
    return isinstance(value, Mapping) and set(value) == {_BYTES}


def check_legacy(state: Mapping[str, Any]) -> None:
    """ValueError for a version-1 checkpoint that holds pickles; nothing is unpickled."""
    blobs = _blobs(state)
    if not blobs:
        return
    raise ValueError(
        "this DataLoader checkpoint has version 1: the dataset states of workers "
        f"{blobs} are pickles, and conveyor no longer unpickles checkpoint content (a pickle "
        "runs whatever code it holds, even from a file loaded with weights_only=True). "
        "Restart the epoch; or, only if you wrote this file yourself and trust it, convert it "
        "once with conveyor.state.unpickle_legacy_checkpoint(state, trusted=True) (unsafe "
        "for files of unknown origin) and save the result"
    )


def unpickle_legacy_checkpoint(state: Mapping[str, Any], *, trusted: bool) -> dict[str, Any]:
    """A version-2 copy of a version-1 checkpoint, its pickled worker states unpickled.

    UNSAFE for files you did not write: unpickling runs any code the file holds. ``trusted``
    must be passed as True to say you know this. Takes a `DataLoader.state_dict()` or a
    `StatefulDataLoader.state_dict()` (conveyor's state under ``"_conveyor"``).
    """
    if trusted is not True:
        raise ValueError(
            "unpickle_legacy_checkpoint runs the code inside the pickles it reads: pass "
            "trusted=True, and only for checkpoints you wrote yourself"
        )
    if isinstance(state.get(_CONVEYOR_KEY), Mapping):
        converted = dict(state)
        converted[_CONVEYOR_KEY] = _converted(state[_CONVEYOR_KEY])
        return converted
    return _converted(state)


def _converted(state: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(state)
    if out.get("version") != 1:
        raise ValueError(
            f"unpickle_legacy_checkpoint converts version-1 checkpoints; this one has version "
            f"{out.get('version')!r}"
        )
    workers = out.get("workers")
    if isinstance(workers, Mapping) and isinstance(workers.get("states"), list):
        workers = dict(workers)
        workers["states"] = [_unpickled(blob) for blob in workers["states"]]
        out["workers"] = workers
    out["version"] = 2
    return out


def _unpickled(blob: Any) -> Any:
    if isinstance(blob, Mapping) and set(blob) == {_BYTES}:
        blob = base64.b64decode(blob[_BYTES])
    if isinstance(blob, bytes | bytearray):
        return pickle.loads(blob)  # the caller vouched for this file (trusted=True)
    return blob
