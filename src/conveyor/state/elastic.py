"""Progress through an epoch's units (shards) that any topology can resume: pure arithmetic.

An epoch reads ``units`` units (shards, files, ...) in a fixed global order of positions
``0 .. units - 1``. What has been read is a `Progress`: every position below ``below`` is
done, so are the positions in ``done``, and each position in ``partial`` has delivered
its first ``offset`` items. What is left is the *pending* sequence: the partial positions
first (in position order), then the untouched ones in order. ``n`` consumers (ranks x
workers) split it: consumer ``c`` reads pending entries ``c, c + n, c + 2n, ...``.

A consumer's checkpoint (`ConsumerProgress`) is the progress it started from, its slot
and how far it got: ``index`` entries of its share finished, ``offset`` items of the
current one delivered (counted from the unit's start). `merge` folds the checkpoints of
every consumer back into one `Progress`, which a new set of consumers of any size splits
again: whole units not started are dealt out anew, units in progress continue at their
offsets, nothing is read twice or left out. Sizes stay small because consumers advance
in step: ``done`` and ``partial`` hold about (consumers x units in flight) entries.

Items read but not yet delivered (a shuffle buffer's samples, as positions) travel too: a
consumer's checkpoint lists those it holds under ``items`` (`conveyor.state.
position_codec`), `merge` gathers every consumer's, and consumer ``c`` of the next split
takes ``items[c::n]`` and delivers them first.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NotRequired, TypedDict

from conveyor.state.position_codec import Position, decode_positions, encode_positions

__all__ = [
    "ELASTIC_VERSION",
    "check_progress",
    "ConsumerProgress",
    "Pending",
    "Progress",
    "consumer_progress",
    "fresh_progress",
    "is_elastic",
    "item_share",
    "merge",
]

ELASTIC_VERSION = 1


class Progress(TypedDict):
    """What an epoch has read, independent of who read it (JSON-serialisable)."""

    elastic: int  # ELASTIC_VERSION; marks a state any topology can resume
    identity: dict[str, Any]  # what the order depends on: "units" (their number), seed, ...
    below: int  # every position below is done
    done: list[int]  # positions >= below that are done (sorted)
    partial: list[list[int]]  # [position, items delivered] of units in progress (sorted)
    items: NotRequired[dict[str, Any] | None]  # positions read, not delivered (see module)


class ConsumerProgress(Progress):
    """One consumer's checkpoint: the progress it split, its slot, how far it got."""

    consumers: int
    consumer: int
    index: int  # entries of this consumer's share finished
    offset: int  # items of the current entry delivered, from the unit's start


def fresh_progress(identity: Mapping[str, Any]) -> Progress:
    """Nothing read yet."""
    return Progress(elastic=ELASTIC_VERSION, identity=dict(identity), below=0, done=[], partial=[])


def is_elastic(state: object) -> bool:
    """Whether ``state`` is a `Progress` (or a consumer's), resumable on any topology."""
    return isinstance(state, Mapping) and state.get("elastic") == ELASTIC_VERSION


def _int_in(value: Any, field: str, low: int, high: int) -> int:
    if type(value) is not int:
        raise TypeError(f"progress field {field} is a {type(value).__name__}, expected int")
    if not low <= value < high:
        raise ValueError(f"progress field {field}={value} is outside [{low}, {high})")
    return value


def check_progress(state: Any) -> None:
    """TypeError / ValueError naming the field when ``state`` is no sound elastic progress
    (a consumer's, a merged one, `TarShards`'): damaged, truncated or edited."""
    if not is_elastic(state):
        raise ValueError("not an elastic progress (its 'elastic' marker is missing)")
    for key in ("identity", "below", "done", "partial"):
        if key not in state:
            raise ValueError(f"progress field {key} is missing")
    identity = state["identity"]
    if not isinstance(identity, Mapping):
        raise TypeError("progress field identity is no dict")
    units = _int_in(identity.get("units"), "identity.units", 0, 2**53)
    below = _int_in(state["below"], "below", 0, units + 1)
    _check_positions(state["done"], state["partial"], below, units)
    if "consumers" in state:
        consumers = _int_in(state["consumers"], "consumers", 1, 2**31)
        _int_in(state.get("consumer"), "consumer", 0, consumers)
        _int_in(state.get("index"), "index", 0, units + 1)
        _int_in(state.get("offset"), "offset", 0, 2**63)
    items = state.get("items")
    if items is not None:
        if not isinstance(items, Mapping):
            raise TypeError("progress field items is no dict")
        decode_positions(items)


def _check_positions(done: Any, partial: Any, below: int, units: int) -> None:
    """``done`` and ``partial`` sorted, distinct, apart, within ``[below, units)``."""
    if not isinstance(done, list) or not isinstance(partial, list):
        raise TypeError("progress fields done and partial are lists")
    for index, position in enumerate(done):
        _int_in(position, f"done[{index}]", below, units)
    if done != sorted(set(done)):
        raise ValueError("progress field done is not sorted and distinct")
    positions = []
    for index, pair in enumerate(partial):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError(f"progress field partial[{index}] is no [position, offset] pair")
        positions.append(_int_in(pair[0], f"partial[{index}][0]", below, units))
        _int_in(pair[1], f"partial[{index}][1]", 0, 2**63)
    if positions != sorted(set(positions)) or set(positions) & set(done):
        raise ValueError("progress field partial lists a position twice, or one done")


def consumer_progress(
    base: Progress, consumers: int, consumer: int, index: int, offset: int
) -> ConsumerProgress:
    return ConsumerProgress(
        elastic=ELASTIC_VERSION,
        identity=base["identity"],
        below=base["below"],
        done=list(base["done"]),
        partial=[list(pair) for pair in base["partial"]],
        consumers=consumers,
        consumer=consumer,
        index=index,
        offset=offset,
    )


class Pending:
    """The pending sequence of a `Progress` with random access: partial units, then the
    untouched positions in order. ``units`` is the number of positions in the epoch."""

    def __init__(self, progress: Mapping[str, Any], units: int) -> None:
        self.units = units
        self.below = int(progress["below"])
        self.offsets = {int(p): int(o) for p, o in progress["partial"]}
        self.head = sorted(self.offsets)
        self._holes = sorted({int(p) for p in progress["done"]} | set(self.offsets))
        self._tail_length = max(0, units - self.below - len(self._holes))

    def __len__(self) -> int:
        return len(self.head) + self._tail_length

    def __getitem__(self, entry: int) -> int:
        """The position at pending ``entry`` (0 <= entry < len)."""
        if entry < len(self.head):
            return self.head[entry]
        return self._tail_at(entry - len(self.head))

    def _tail_at(self, k: int) -> int:
        """The ``k``-th position >= below that is no hole: O(log holes)."""
        holes = self._holes
        low, high = self.below + k, self.below + k + len(holes)
        while low < high:  # smallest p with p - below - holes(<= p) >= k, p not a hole
            middle = (low + high) // 2
            if middle - self.below - bisect_right(holes, middle) + 1 > k:
                high = middle
            else:
                low = middle + 1
        return low

    def share(self, consumer: int, consumers: int, start: int = 0) -> Iterator[tuple[int, int]]:
        """``(position, offset to start at)`` of a consumer's entries from its ``start``-th."""
        for entry in range(consumer + start * consumers, len(self), consumers):
            position = self[entry]
            yield position, self.offsets.get(position, 0)

    def share_length(self, consumer: int, consumers: int) -> int:
        return max(0, -(-(len(self) - consumer) // consumers))


def item_share(progress: Mapping[str, Any], consumer: int, consumers: int) -> list[Position]:
    """The items a consumer of a new split delivers first: every ``consumers``-th."""
    items = progress.get("items")
    return decode_positions(items)[consumer::consumers] if items else []


def _carried_items(states: Sequence[Mapping[str, Any] | None], count: int) -> list[Position]:
    """Items still to deliver: those each consumer holds, and the split's own share of
    any consumer that has not checkpointed since the split (it holds them unread)."""
    carried: list[Position] = []
    bases = [s for s in states if s is not None and "consumers" not in s]
    for slot, state in enumerate(states):
        if state is not None and "consumers" in state:
            held = state.get("items")
            carried.extend(decode_positions(held) if held else [])
        elif bases:
            carried.extend(item_share(bases[0], slot, count))
    return carried


def merge(states: Sequence[Mapping[str, Any] | None]) -> Progress | None:
    """One `Progress` from the checkpoints of every consumer of one split.

    Entries may be None (that consumer delivered nothing since the split began) or the
    split's own `Progress` (likewise). All consumer checkpoints must come from the same
    split (same progress, same number of consumers); ValueError otherwise. None when every
    entry is None (nothing delivered in a fresh epoch).
    """
    consumers = [s for s in states if s is not None and "consumers" in s]
    bases = [s for s in states if s is not None]
    if not bases:
        return None
    base = bases[0]
    for other in bases[1:]:
        _check_same_split(base, other)
    count = int(consumers[0]["consumers"]) if consumers else len(states)
    carried = _carried_items(states, count)
    items = encode_positions(carried) if carried else None
    if not consumers:
        return {**_plain(base), "items": items}
    pending = Pending(base, int(base["identity"]["units"]))
    reached = [0] * count  # entries finished per consumer
    current: dict[int, int] = {}  # pending entry -> items delivered
    seen: set[int] = set()
    for state in consumers:
        slot, index = int(state["consumer"]), int(state["index"])
        if slot in seen or not 0 <= slot < count:
            raise ValueError(f"merge: consumer {slot} of {count} twice, or out of range")
        seen.add(slot)
        reached[slot] = index
        entry = slot + index * count
        if entry < len(pending) and int(state["offset"]) > 0:
            current[entry] = int(state["offset"])
    return {**_folded(base, pending, count, reached, current), "items": items}


def _folded(
    base: Mapping[str, Any],
    pending: Pending,
    count: int,
    reached: list[int],
    current: dict[int, int],
) -> Progress:
    total = len(pending)
    watermark = min([total] + [slot + index * count for slot, index in enumerate(reached)])
    done = {int(p) for p in base["done"]}
    head_done = min(watermark, len(pending.head))
    done.update(pending.head[:head_done])
    below = pending.below
    if watermark > len(pending.head):  # every position up to the watermark's is done
        below = pending[watermark] if watermark < total else pending.units
    for slot, index in enumerate(reached):
        first = max(0, -(-(watermark - slot) // count))
        done.update(pending[slot + j * count] for j in range(first, index))
    partial = {p: o for p, o in pending.offsets.items() if p not in done}
    partial.update({pending[entry]: offset for entry, offset in current.items()})
    while below in done:
        below += 1
    done = {p for p in done if p >= below}
    return Progress(
        elastic=ELASTIC_VERSION,
        identity=dict(base["identity"]),
        below=below,
        done=sorted(done),
        partial=[[p, partial[p]] for p in sorted(partial) if p >= below and p not in done],
    )


def _plain(state: Mapping[str, Any]) -> Progress:
    return Progress(
        elastic=ELASTIC_VERSION,
        identity=dict(state["identity"]),
        below=int(state["below"]),
        done=list(state["done"]),
        partial=[list(pair) for pair in state["partial"]],
    )


def _check_same_split(one: Mapping[str, Any], other: Mapping[str, Any]) -> None:
    for field in ("identity", "below", "done", "partial"):
        if one[field] != other[field]:
            raise ValueError(
                f"merge: the checkpoints come from different epochs or splits ({field} "
                f"{one[field]!r} != {other[field]!r}); merge the checkpoints of one moment"
            )
    if "consumers" in one and "consumers" in other and one["consumers"] != other["consumers"]:
        raise ValueError(
            f"merge: checkpoints of {one['consumers']} and of {other['consumers']} consumers"
        )
