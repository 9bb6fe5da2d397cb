"""Reading the mixture's sources by item number: random access or a stream read in order.

Item ``k`` of a source is its ``k``-th sample counted over passes: a source that ends is
read again from its start (a new pass) when the mixture cycles it. A map-style source
(``__getitem__`` and ``__len__``) reads item ``k`` directly: pass ``k // len``, through a
keyed permutation of that pass when shuffling. A stream (an IterableDataset, an
IterDataPipe, any re-iterable) is read in order; item numbers may skip ahead (skipped
samples are read and dropped), never back, and ``read`` says when a pass runs out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from conveyor.keyed_permutation import KeyedPermutation, derive_key
from conveyor.state.protocol import has_state
from conveyor.torch_compat import is_iterable_style

__all__ = ["MapSource", "StreamSource", "is_map_style", "reader_for"]

_PASS_PURPOSE = 4


def is_map_style(source: object) -> bool:
    if is_iterable_style(source):
        return False
    return callable(getattr(source, "__getitem__", None)) and callable(
        getattr(source, "__len__", None)
    )


class MapSource:
    """A random-access source: item ``k`` is sample ``order_p(k % len)``, ``p = k // len``.

    It never runs out by itself: where its passes end follows from the schedule, so the
    mixture decides from positions alone whether to stop or to read on (cycling).
    """

    def __init__(self, name: str, dataset: Any, *, key: int | None) -> None:
        self.name = name
        self._dataset = dataset
        self.length = len(dataset)
        self._key = key  # None: read each pass in index order
        self._order: tuple[int, KeyedPermutation] | None = None

    def read(self, item: int) -> tuple[bool, Any]:
        if self.length == 0:
            raise ValueError(f"Mixture source {self.name!r} is empty: it cannot be cycled")
        number, offset = divmod(item, self.length)
        return True, self._dataset[self._index(number, offset)]

    def fetch(self, index: int) -> Any:
        """The sample at a dataset index that `indices` computed."""
        return self._dataset[index]

    def indices(self, items: NDArray[np.int64]) -> NDArray[np.int64]:
        """Dataset indices of many items at once (one NumPy pass per pass number)."""
        numbers, offsets = np.divmod(items, self.length)
        if self._key is None:
            return offsets
        out = np.empty_like(offsets)
        for number in np.unique(numbers).tolist():
            where = np.flatnonzero(numbers == number)
            order = self._order_of(number)
            out[where] = order(offsets[where].astype(np.uint64)).astype(np.int64)
        return out

    def _index(self, number: int, offset: int) -> int:
        if self._key is None:
            return offset
        return self._order_of(number).at(offset)

    def _order_of(self, number: int) -> KeyedPermutation:
        assert self._key is not None
        if self._order is None or self._order[0] != number:
            self._order = (number, KeyedPermutation(self.length, derive_key(self._key, number)))
        return self._order[1]


class StreamSource:
    """A source read in order; each new pass iterates it again."""

    def __init__(self, name: str, stream: Iterable[Any]) -> None:
        self.name = name
        self._stream = stream
        self._iterator: Iterator[Any] | None = None
        self.next_item = 0  # the item number the iterator yields next
        self._fresh_pass = False  # the iterator was just restarted: nothing read from it yet
        self._run_out = False  # the pass ended; waiting for start_next_pass
        self.first_pass_length: int | None = None  # known once the stream has run out

    @property
    def stateful(self) -> bool:
        return has_state(self._stream)

    @property
    def started(self) -> bool:
        return self._iterator is not None

    def read(self, item: int) -> tuple[bool, Any]:
        """Item ``item`` of the current pass, skipping ahead to it; ``(False, None)`` when
        the pass runs out first (then `start_next_pass` to go on)."""
        if item < self.next_item:
            raise ValueError(
                f"Mixture source {self.name!r} is a stream: item {item} was already read "
                f"(next is {self.next_item}); a stream cannot go back"
            )
        if self._run_out:
            return False, None
        if self._iterator is None:
            self._iterator = iter(self._stream)
        while self.next_item < item:  # another replica's items: read and drop
            if not self._take()[0]:
                return False, None
        return self._take()

    def skip_to(self, item: int) -> None:
        """Read and drop up to ``item``, starting new passes where the stream runs out."""
        if self._iterator is None:
            self._iterator = iter(self._stream)
        while self.next_item < item:
            if self._run_out:
                self.start_next_pass()
            self._take()

    def _take(self) -> tuple[bool, Any]:
        assert self._iterator is not None
        try:
            sample = next(self._iterator)
        except StopIteration:
            if self._fresh_pass:
                raise ValueError(
                    f"Mixture source {self.name!r} yielded nothing on a new pass: it cannot "
                    "be cycled (a generator runs once; pass a re-iterable source)"
                ) from None
            self._run_out = True
            if self.first_pass_length is None:
                self.first_pass_length = self.next_item
            return False, None
        self._fresh_pass = False
        self.next_item += 1
        return True, sample

    def start_next_pass(self) -> None:
        self._iterator = iter(self._stream)
        self._fresh_pass = True
        self._run_out = False

    def state(self) -> Any:
        """The stream's own checkpoint (only when `stateful`)."""
        return self._stream.state_dict()  # type: ignore[attr-defined]

    def restore(
        self, items_read: int, state: Mapping[str, Any] | None, first_pass_length: int | None
    ) -> None:
        """Continue after ``items_read`` items: from the stream's own checkpoint when given,
        else by reading ``items_read`` items again and dropping them, cycling at every end
        as the checkpointed run did."""
        if state is None:
            self.skip_to(items_read)
            return
        self._stream.load_state_dict(state)  # type: ignore[attr-defined]
        self._iterator = iter(self._stream)
        self.next_item = items_read
        self.first_pass_length = first_pass_length


def reader_for(name: str, source: object, *, key: int | None) -> MapSource | StreamSource:
    """The reader of one source: random access when it is map-style, else a stream."""
    if is_map_style(source):
        return MapSource(name, source, key=key)
    if isinstance(source, Iterable):
        return StreamSource(name, source)
    raise TypeError(
        f"Mixture source {name!r} must be a map-style dataset (__getitem__ and __len__) or "
        f"an iterable, got {type(source).__name__}"
    )
