"""Large Python containers held by a dataset: what forked workers copy page by page.

Reading an item of a list writes the item's reference count, so the page holding it
becomes private to the worker process that read it (pytorch#13246): over an epoch
every process worker grows by a copy of the container's objects. The doctor measures
the growth (`measure`); this module finds the attribute it comes from with a shallow,
bounded walk of the dataset (its attributes, those of datasets it wraps), skipping the
lists the loader already hands its workers as shared tables (``share_records``).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from conveyor.engine.workers.shared_records import SHARE_MIN_RECORDS
from conveyor.torch_compat import TorchDataset

__all__ = ["LargeContainer", "large_containers"]

MIN_ITEMS = SHARE_MIN_RECORDS  # shorter ones cost a worker a few MB at most
_MAX_DEPTH = 3  # dataset -> attribute -> wrapped dataset (Subset.dataset) -> its attribute
_MAX_ATTRIBUTES = 256  # attributes looked at in all: the walk stays cheap
_SAMPLED = 200  # items whose size is measured to estimate a container's


@dataclass(frozen=True)
class LargeContainer:
    """One attribute holding many Python objects, and what they weigh."""

    path: str  # "names", "dataset.samples" (as the loader's shared tables name them)
    kind: str  # "list", "tuple", "dict", "set"
    length: int
    item_types: tuple[str, ...]  # of the sampled items (a dict's: its values')
    objects_bytes: int  # estimated: the items' objects (each read writes its page)

    @property
    def strings(self) -> bool:
        """All ``str`` or all ``bytes``: a `conveyor.StringTable` can hold them."""
        return self.kind in ("list", "tuple") and self.item_types in (("str",), ("bytes",))

    @property
    def numbers(self) -> bool:
        return bool(self.item_types) and set(self.item_types) <= {"int", "float", "bool"}

    def described(self) -> str:
        types = "/".join(self.item_types) or "objects"
        return f"{self.kind} of {self.length:,} {types} (~{self.objects_bytes / 1e6:.0f} MB)"


def large_containers(dataset: Any, shared: Collection[str] = ()) -> list[LargeContainer]:
    """``dataset``'s attributes holding at least `MIN_ITEMS` objects, largest first; the
    attribute paths in ``shared`` (read from shared tables by the workers) left out."""
    found = [
        _weighed(path, value)
        for path, value in itertools.islice(_attributes(dataset, "", 0, set()), _MAX_ATTRIBUTES)
        if isinstance(value, (list, tuple, dict, set, frozenset))
        and len(value) >= MIN_ITEMS
        and path not in shared
    ]
    return sorted(found, key=lambda c: c.objects_bytes, reverse=True)


def _attributes(obj: Any, prefix: str, depth: int, seen: set[int]) -> Iterator[tuple[str, Any]]:
    """(path, value) of ``obj``'s attributes, and of the datasets it wraps."""
    if depth >= _MAX_DEPTH or id(obj) in seen:
        return
    seen.add(id(obj))
    try:
        attributes = dict(vars(obj))
    except TypeError:
        return  # no __dict__ (slots, builtins)
    for name, value in attributes.items():
        path = f"{prefix}.{name}" if prefix else name
        yield path, value
        if isinstance(value, TorchDataset):
            yield from _attributes(value, path, depth + 1, seen)
        elif type(value) in (list, tuple) and len(value) <= 64:  # ConcatDataset.datasets
            for i, member in enumerate(value):
                if isinstance(member, TorchDataset):
                    yield from _attributes(member, f"{path}[{i}]", depth + 1, seen)


def _weighed(path: str, value: Any) -> LargeContainer:
    if isinstance(value, dict):
        items = list(itertools.islice(value.items(), _SAMPLED))
        types = {type(v).__name__ for _, v in items}
        sizes = [_size(k) + _size(v) for k, v in items]
    else:
        if isinstance(value, (list, tuple)):
            items = list(value[:: max(1, len(value) // _SAMPLED)][:_SAMPLED])
        else:
            items = list(itertools.islice(value, _SAMPLED))
        types = {type(v).__name__ for v in items}
        sizes = [_size(v) for v in items]
    mean = sum(sizes) / len(sizes) if sizes else 0.0
    weight = int(mean * len(value))
    return LargeContainer(path, type(value).__name__, len(value), tuple(sorted(types)), weight)


def _size(obj: Any) -> int:
    """An object's bytes and, one level down, its members' (a record dict's values: its
    keys are mostly the same interned strings in every record)."""
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(sys.getsizeof(v) for v in obj.values())
    elif isinstance(obj, (list, tuple)):
        size += sum(sys.getsizeof(v) for v in obj)
    else:
        members = getattr(obj, "__dict__", None)
        if isinstance(members, dict):
            size += sys.getsizeof(members) + sum(sys.getsizeof(v) for v in members.values())
    return size
