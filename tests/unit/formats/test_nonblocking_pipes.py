"""Loading nodes pass the RFC's NotAvailable through without losing or repeating data."""

from __future__ import annotations

import pickle
from typing import Any

from conveyor.datapipes import NotAvailable
from conveyor.datapipes.base import Cursor, IterDataPipe, SourceCursor, StateDict
from conveyor.datapipes.iter import IterableWrapper
from conveyor.datapipes.iter.loading import (
    FileOpener,
    RoutedDecoder,
    TarArchiveLoader,
    WebDataset,
)


class Hiccup(IterDataPipe[Any]):
    """Passes items through, but is not ready on the first try of every item."""

    def __init__(self, datapipe: IterDataPipe[Any]) -> None:
        self.datapipe = datapipe

    def _make_cursor(self, state: StateDict | None) -> Cursor[Any]:
        return _HiccupCursor(self.datapipe, state, "Hiccup")


class _HiccupCursor(SourceCursor[Any]):
    ready = False

    def next(self) -> Any:
        if not self.ready:
            self.ready = True
            raise NotAvailable()
        self.ready = False
        return self.source.nonblocking_next()


def graph(shards: list[str]) -> IterDataPipe[Any]:
    opened = Hiccup(FileOpener(IterableWrapper(shards), mode="b"))
    members = Hiccup(TarArchiveLoader(opened, stream=False))
    return RoutedDecoder(Hiccup(WebDataset(members)), image=None)


def drain(pipe: IterDataPipe[Any], limit: int | None = None) -> tuple[list[str], int]:
    keys: list[str] = []
    pending = 0
    while limit is None or len(keys) < limit:
        try:
            keys.append(pipe.nonblocking_next()["__key__"])
        except NotAvailable:
            pending += 1
        except StopIteration:
            break
    return keys, pending


def test_not_available_passes_through(shards: list[str]) -> None:
    keys, pending = drain(graph(shards))
    assert keys == [f"{i:06d}" for i in range(20)] and pending > 20


def test_state_taken_while_pending_resumes_exactly(shards: list[str]) -> None:
    expected = [f"{i:06d}" for i in range(20)]
    for stop in (0, 3, 5, 7, 12):
        pipe = graph(shards)
        head, _ = drain(pipe, stop)
        while True:  # take the state just after a NotAvailable
            try:
                head.append(pipe.nonblocking_next()["__key__"])
            except NotAvailable:
                break
        state = pickle.loads(pickle.dumps(pipe.state_dict()))
        pipe.close()
        resumed = graph(shards)
        resumed.load_state_dict(state)
        rest, _ = drain(resumed)
        assert head + rest == expected, stop
