"""The Mixture's checkpoint: positions and the weight history, never per-source counters.

Counts are derived: item numbers follow from the schedule (segments of the weight
history) and the position reached. The history stores each distinct weight vector once,
as encoded integer shares (the construction weights as the word ``"initial"``, checked
against a digest), and each change as ``[position, vector number]``. Size: about 200
bytes plus ~12 bytes per change plus each distinct vector set by ``set_weights`` (a few
bits per source after compression), whatever the number of samples; streams that have a
``state_dict`` add their own state on top.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from conveyor.mixture.rates import Rates, decode_shares, encode_shares, rates_from_shares
from conveyor.mixture.schedule import Schedule

__all__ = ["STATE_VERSION", "MixtureState", "history_from_state", "history_to_state"]

STATE_VERSION = 1
INITIAL = "initial"


class MixtureState(TypedDict):
    version: int
    sources: str  # digest of the sources' names, kinds and map-style lengths
    weights: str  # digest of the construction weights
    seed: int
    epoch: int  # runs of this Mixture before the checkpointed one
    stop_on: str
    position: int  # positions [0, position) were produced
    vectors: list[str]  # weight vectors used: "initial" or encoded shares
    changes: list[list[int]]  # [start position, vector number], the first at 0
    ends: dict[str, int]  # stateful streams that ran out: source number -> first-pass length
    streams: dict[str, Any]  # stateful streams' own checkpoints, by source name


def history_to_state(schedule: Schedule, initial: Rates) -> tuple[list[str], list[list[int]]]:
    vectors: list[str] = []
    changes: list[list[int]] = []
    for segment in schedule.segments:
        shares = segment.rates.shares
        text = INITIAL if shares == initial.shares else encode_shares(shares)
        if text not in vectors:
            vectors.append(text)
        changes.append([segment.start, vectors.index(text)])
    return vectors, changes


def history_from_state(state: Mapping[str, Any], initial: Rates) -> Schedule:
    vectors: Sequence[str] = state["vectors"]
    decoded = [initial if v == INITIAL else rates_from_shares(decode_shares(v)) for v in vectors]
    if any(len(r.shares) != len(initial.shares) for r in decoded):
        raise ValueError("Mixture checkpoint has weight vectors for another number of sources")
    changes: Sequence[Sequence[int]] = state["changes"]
    if not changes or changes[0][0] != 0:
        raise ValueError("Mixture checkpoint: the weight history must start at position 0")
    schedule = Schedule(decoded[changes[0][1]])
    for start, number in changes[1:]:
        schedule.change(int(start), decoded[number])
    return schedule


def sources_digest(names: Sequence[str], lengths: Sequence[int | None]) -> str:
    """Names, kinds (map-style or stream) and lengths of map-style sources, hashed."""
    pairs = zip(names, lengths, strict=True)
    text = "\x00".join(f"{n}\x01{'stream' if ln is None else ln}" for n, ln in pairs)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
