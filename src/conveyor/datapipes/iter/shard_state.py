"""`TarShards`' state: one flat, elastic dict instead of its pipeline's nested states.

`TarShards` is a fixed pipeline (``ShardLister -> open_files -> load_from_tar ->
webdataset -> shuffle [-> decode]``) whose nested state holds, deep down, three facts:
the shard lister's elastic progress, the byte offset of the next sample to read in the
current shard, and the shuffle buffer's positions with its RNG. `flatten` lifts them into
one `conveyor.state.elastic` consumer progress (``offset``: that byte offset; ``items``:
the buffer's positions), which the DataLoader merges across workers and ranks like any
elastic stream's; `unflatten` rebuilds the nested state for a consumer: exactly its own
for the same slot, or its share of a merged progress (shards not begun dealt out again,
shards begun continued at their byte offset, buffered samples re-read and delivered).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conveyor.datapipes.cursor import FRESH_STATE, StateDict
from conveyor.datapipes.rng import SplitMix64
from conveyor.state.elastic import ELASTIC_VERSION, item_share
from conveyor.state.position_codec import encode_positions

__all__ = ["STATE_VERSION", "flatten", "unflatten"]

STATE_VERSION = 2
_MIX = 0x9E3779B97F4A7C15
_PROGRESS = ("elastic", "identity", "below", "done", "partial")


def _layers(nested: StateDict, decoded: bool) -> list[Mapping[str, Any]] | None:
    """The pipeline's states from the shuffle down to the tar reader (None before a pull)."""
    node = nested["source"] if decoded else nested
    found: list[Mapping[str, Any]] = []
    for _ in range(4):  # shuffle, end-before-error, webdataset, tar
        if not isinstance(node, Mapping) or node.get("fresh"):
            return None
        found.append(node)
        node = node.get("source")
    return found


def flatten(nested: StateDict, decoded: bool, lister_now: Mapping[str, Any]) -> StateDict:
    """The flat elastic state of the pipeline's ``nested`` one (fresh stays fresh).

    ``lister_now``: the shard lister's current state. The nested state holds the lister as
    it was before the current shard was handed out, which, while the first shard is read,
    is fresh (no seed drawn yet) or the merged progress it was given (not split yet): then
    the progress is the current one's, at entry 0."""
    layers = _layers(nested, decoded)
    if layers is None:
        return dict(FRESH_STATE)
    shuffle, _, _, tar = layers
    source = tar["source"].get("source")  # the opener's source: the lister
    if isinstance(source, Mapping) and "consumers" in source.get("progress", {}):
        progress = source["progress"]
    elif "progress" in lister_now:  # before its first shard: fresh, or merged, not split
        progress = {**lister_now["progress"], "index": 0}
    else:  # the lister has not been asked for a shard yet: nothing was read
        return dict(FRESH_STATE)
    position = tar.get("position")
    return {
        "version": STATE_VERSION,
        **progress,
        "offset": int(position) if position else 0,
        "items": shuffle["positions"],
        "shuffle": {"enabled": shuffle["enabled"], "rng": shuffle["rng"], "done": shuffle["done"]},
    }


def unflatten(
    state: Mapping[str, Any], slot: tuple[int, int], decoded: bool, shuffled: bool
) -> StateDict:
    """The pipeline's nested state for consumer ``slot`` = ``(consumers, consumer)``:
    its own state again, or its share of a merged progress (``shuffled``: the pipe's
    shuffle setting, for a new split)."""
    consumers, consumer = slot
    progress = {key: state[key] for key in _PROGRESS}
    if "consumers" in state:  # a consumer's own (the lister refuses another slot's)
        progress.update({k: state[k] for k in ("consumers", "consumer", "index")}, offset=0)
        position = int(state["offset"]) or None
        items, shuffle = state.get("items"), dict(state["shuffle"])
    else:  # a merged progress: shards and buffered samples dealt out again
        position = None
        share = item_share(state, consumer, consumers)
        enabled = shuffled or bool(share)  # samples read elsewhere are delivered here
        items = encode_positions(share) if enabled else None
        shuffle = {"enabled": enabled, "rng": _fresh_rng(state, slot), "done": False}
    lister = {"version": 2, "progress": progress}
    tar = {"version": 1, "source": {"version": 1, "source": lister}, "position": position}
    end = {"version": 1, "source": {"version": 1, "source": tar}}
    nested = {"version": 1, "source": end, **shuffle, "buffer": None, "positions": items}
    if items is None:
        nested["buffer"] = []
    return {"version": 1, "source": nested} if decoded else nested


def _fresh_rng(state: Mapping[str, Any], slot: tuple[int, int]) -> int:
    """A shuffle seed for a consumer of a new split: the pass's seed, the split, the
    progress (so two splits of one pass do not repeat an order)."""
    seed = state["identity"].get("seed") or 0
    mixed = seed ^ (slot[0] * _MIX) ^ (slot[1] << 17) ^ (int(state["below"]) << 40)
    return SplitMix64(mixed ^ len(state["done"])).next_u64()


def is_flat(state: Mapping[str, Any]) -> bool:
    """Whether ``state`` is `flatten`'s (or a merged elastic progress), not a nested one."""
    return state.get("elastic") == ELASTIC_VERSION
