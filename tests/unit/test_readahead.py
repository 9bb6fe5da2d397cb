"""ReadAheadStream: the bytes of the object, in a bounded window of requested blocks."""

from __future__ import annotations

import io
from concurrent.futures import Future

import pytest

from conveyor.storage.readahead import ReadAheadStream

DATA = bytes(range(256)) * 41  # 10,496 bytes: 10 blocks of 1,000 and a short one


def _done(value: object) -> Future[object]:
    future: Future[object] = Future()
    future.set_result(value)
    return future


class FakeStore:
    """Answers ranged reads of DATA; records each request; can hold answers back."""

    def __init__(self, data: bytes = DATA, hold: bool = False) -> None:
        self.data = data
        self.hold = hold
        self.requests: list[tuple[int, int]] = []
        self.pending: list[tuple[Future[bytes], int, int]] = []

    def fetch(self, start: int, end: int) -> Future[bytes]:
        self.requests.append((start, end))
        future: Future[bytes] = Future()
        if self.hold:
            self.pending.append((future, start, end))
        elif start >= len(self.data):
            future.set_exception(OSError(22, "The requested range is not satisfiable"))
        else:
            future.set_result(self.data[start:end])
        return future

    def release(self) -> None:
        for future, start, end in self.pending:
            if not future.cancelled():
                future.set_result(self.data[start:end])
        self.pending.clear()


def _stream(store: FakeStore, depth: int = 3, size: object = None) -> ReadAheadStream:
    known = len(store.data) if size is None else size
    return ReadAheadStream("s3://b/k", store.fetch, known, block_size=1000, depth=depth)  # type: ignore[arg-type]


@pytest.mark.parametrize("chunk", [1, 511, 512, 1000, 1001, 4096, -1])
def test_reads_return_the_object_whatever_the_read_size(chunk: int) -> None:
    stream = _stream(FakeStore())
    parts = []
    while part := stream.read(chunk):
        parts.append(part)
    assert b"".join(parts) == DATA
    assert stream.read(10) == b""


def test_at_most_depth_blocks_are_requested_ahead_of_the_position() -> None:
    store = FakeStore()
    stream = _stream(store, depth=3)
    while stream.read(250):
        block = stream.tell() // 1000
        furthest = max(start for start, _ in store.requests) // 1000
        assert furthest <= block + 3  # the block being read plus at most depth ahead
        assert len(stream._blocks) <= 3
    assert sorted(set(store.requests)) == sorted(store.requests)  # no block fetched twice
    assert len(store.requests) == 11


def test_blocks_are_requested_before_they_are_read() -> None:
    store = FakeStore(hold=True)
    stream = _stream(store, depth=4)
    # the whole window at open, before any read (the size is known)
    assert [start for start, _ in store.requests] == [0, 1000, 2000, 3000]
    store.release()
    assert stream.read(10) == DATA[:10]
    assert [start for start, _ in store.requests] == [0, 1000, 2000, 3000, 4000]


def test_unknown_size_asks_for_one_block_then_a_window_and_finds_the_end() -> None:
    store = FakeStore(data=DATA[:2500])
    size: Future[int] = Future()  # the HEAD request has not answered
    stream = _stream(store, depth=4, size=size)
    assert store.requests == [(0, 1000)]
    assert stream.read(1000) == DATA[:1000]
    # a full first block: the object goes on, so the window fills without the size
    assert [start for start, _ in store.requests] == [0, 1000, 2000, 3000, 4000]
    size.set_result(2500)
    assert stream.read() == DATA[1000:2500]  # the blocks past the end (416) read as the end
    assert stream.read(1) == b""


def test_unknown_size_and_a_short_first_block_is_the_whole_object() -> None:
    store = FakeStore(data=DATA[:700])
    stream = _stream(store, depth=4, size=Future())  # the size never comes
    assert stream.read() == DATA[:700]
    assert store.requests == [(0, 1000)]


def test_a_request_past_the_end_reads_as_the_end() -> None:
    store = FakeStore(data=DATA[:1000])  # one full block: the end shows only in the size
    size: Future[int] = Future()
    stream = _stream(store, size=size)
    assert stream.read(1000) == DATA[:1000]
    size.set_result(1000)
    assert stream.read(5) == b""


def test_seek_moves_the_window_and_cancels_blocks_left_behind() -> None:
    store = FakeStore(hold=True)
    stream = _stream(store, depth=3)
    store.release()
    stream.read(1)
    left_behind = [future for future, _, _ in store.pending]
    assert stream.seek(7500) == 7500
    assert all(future.cancelled() for future in left_behind)
    store.release()
    assert stream.read(600) == DATA[7500:8100]
    assert stream.seek(-96, io.SEEK_END) == len(DATA) - 96
    store.release()
    assert stream.read() == DATA[-96:]


def test_close_cancels_what_is_in_flight() -> None:
    store = FakeStore(hold=True)
    stream = _stream(store, depth=3)
    store.release()
    stream.read(1)
    in_flight = [future for future, _, _ in store.pending]
    assert in_flight
    stream.close()
    assert all(future.cancelled() for future in in_flight)
    with pytest.raises(ValueError):
        stream.read(1)


def test_errors_name_the_object_and_the_range() -> None:
    def failing(start: int, end: int) -> Future[bytes]:
        future: Future[bytes] = Future()
        future.set_exception(OSError("connection reset"))
        return future

    stream = ReadAheadStream("s3://b/k", failing, 5000, block_size=1000, depth=2)
    with pytest.raises(OSError, match=r"'s3://b/k' \(bytes 0-999\): OSError: connection reset"):
        stream.read(1)


def test_works_under_a_buffered_reader() -> None:
    buffered = io.BufferedReader(_stream(FakeStore()), buffer_size=300)
    assert buffered.read(2000) == DATA[:2000]
    assert buffered.read() == DATA[2000:]


def test_the_first_blocks_double_up_to_the_block_size() -> None:
    store = FakeStore()
    stream = ReadAheadStream("s3://b/k", store.fetch, len(DATA), 1000, 3, first_block=300)
    assert stream.read(250) == DATA[:250]
    assert stream.read(100) == DATA[250:350]
    assert store.requests[:3] == [(0, 300), (300, 900), (900, 1900)]
    assert stream.seek(1899) == 1899
    assert stream.read() == DATA[1899:]
    assert store.requests[-1] == (9900, 10900)  # the last, short block
    assert len(store.requests) == len(set(store.requests)) == 12  # 300, 600, 10 x 1000


class _ArrivesWhenAwaited(Future[bytes]):
    """A block still on its way when the reader asks for it (it lands during the wait)."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.data = data

    def result(self, timeout: float | None = None) -> bytes:
        if not self.done():
            self.set_result(self.data)
        return super().result(timeout)


def test_the_window_widens_while_the_reader_waits_and_no_further() -> None:
    requests: list[int] = []

    def slow_link(start: int, end: int) -> Future[bytes]:
        requests.append(start)
        return _ArrivesWhenAwaited(DATA[start:end])

    widths: list[int] = []
    stream = ReadAheadStream(
        "s3://b/k", slow_link, len(DATA), 1000, 2, max_depth=5, grew=widths.append
    )
    assert stream.read(1000) == DATA[:1000]  # the first block says nothing about the link
    assert stream.depth == 2
    for block in range(1, 5):
        assert stream.read(1000) == DATA[block * 1000 : (block + 1) * 1000]
    assert stream.depth == 5 and widths == [4, 5]  # doubled per wait, up to max_depth
    assert max(requests) // 1000 == 4 + 5  # the block being read plus the widened window
    assert sorted(set(requests)) == sorted(requests)


def test_a_window_that_never_waits_stays_as_it_started() -> None:
    store = FakeStore()  # every block is in when it is wanted
    stream = ReadAheadStream("s3://b/k", store.fetch, len(DATA), 1000, 2, max_depth=8)  # type: ignore[arg-type]
    assert stream.read() == DATA
    assert stream.depth == 2


def test_an_empty_answer_past_the_end_leaves_the_known_size_alone() -> None:
    """A hinted window is asked for before the size is known; its blocks past a small
    object's end come back empty once the first answer has said the size."""
    data = DATA[:2500]
    size: Future[int] = Future()

    def hinted_link(start: int, end: int) -> Future[bytes]:
        return _done(data[start:end])  # type: ignore[return-value]

    stream = ReadAheadStream("s3://b/k", hinted_link, size, 1000, 4, whole_window=True)
    assert len(stream._blocks) == 4  # the whole window, the size not known yet
    size.set_result(len(data))
    assert stream.seek(3000) == 3000  # a block that was asked for, past the end
    assert stream.read(10) == b""
    assert stream.seek(0, io.SEEK_END) == len(data)
