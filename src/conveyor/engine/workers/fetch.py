"""Turn one index (or one batch of indices) into one collated result.

Used unchanged by the main process (``num_workers=0``) and by every worker, so both
paths produce identical batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from conveyor.engine.workers.sample_seeding import sample_context, seeding_epoch
from conveyor.formats.errors import SampleError
from conveyor.formats.skips import SkipRecord, skip_sink
from conveyor.state import stream_state
from conveyor.state.certificate import digest_identities, digest_indices, digest_keyed
from conveyor.state.plain import NotPlainData
from conveyor.state.protocol import has_state


class FetchSpec(NamedTuple):
    """How a request becomes a batch; derived from the loader's options, sent to workers."""

    dataset: Any
    iterable_style: bool
    auto_collation: bool
    collate_fn: Callable[[Any], Any]
    drop_last: bool
    skip_bad_samples: bool = False  # on_error="skip" (map-style only)
    samples_per_request: int = 1  # a stream's batch size (replaying a resumed stream)
    sample_seed: int | None = None  # per-sample generators (engine/workers/sample_seeding.py)

    @property
    def replay_request(self) -> Any:
        """A request for one batch of a stream (to read and drop it)."""
        return [None] * self.samples_per_request if self.auto_collation else None


Skips = tuple[SkipRecord, ...]
NO_SKIPS: Skips = ()


class CollateTimer:
    """``collate_fn`` with a running total of the seconds spent in it (the doctor's
    collate share: two clock reads per batch, always on)."""

    __slots__ = ("collate_fn", "total_s")

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn
        self.total_s = 0.0

    def __call__(self, samples: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.collate_fn(samples)
        finally:
            self.total_s += time.perf_counter() - started


class BatchSkipped(Exception):
    """Every sample of a request failed and the ``"skip"`` policy dropped them all."""


class MapFetcher:
    """Map-style: ``request`` is an index, or a list of indices when auto-collating."""

    def __init__(self, dataset: Any, auto_collation: bool, collate_fn: Callable[[Any], Any]):
        self._dataset = dataset
        self._auto_collation = auto_collation
        self._collate_fn = collate_fn
        self._getitems = getattr(dataset, "__getitems__", None) if auto_collation else None
        self.last_count = 0  # samples in the last batch fetched
        self.seeding: tuple[int | None, int] = (None, 0)  # (sample_seed, epoch)
        self.collate_timer: CollateTimer | None = None  # set by make_fetcher

    def state(self) -> Any:
        """The dataset's own state (an RNG it draws from, say); None if it has none."""
        if not has_state(self._dataset):
            return None
        try:
            return self._dataset.state_dict()
        except NotPlainData as error:  # the batch still goes out; the loader's save raises
            return error.refused()

    def restore(self, state: Any) -> bool:
        if state is None or not has_state(self._dataset):
            return False
        self._dataset.load_state_dict(state)
        return True

    captured: Any = None  # the dataset's state, taken by ``fetch(..., capture=True)``
    last_digest: tuple[int, int] | None = None  # the last batch's (digest, count)

    def fetch(self, request: Any, capture: bool = False) -> Any:
        """One batch; with ``capture``, the dataset's state after it goes to ``captured``."""
        if self.seeding[0] is None:
            data = self._fetch(request)
        else:
            with seeding_epoch(*self.seeding):
                data = self._fetch(request)
        if capture:
            self.captured = self.state()
        return data

    def _get(self, index: Any) -> Any:
        """``dataset[index]``; with sample seeding, its generators seeded for ``index``."""
        if self.seeding[0] is None:
            return self._dataset[index]
        with sample_context(index):
            return self._dataset[index]

    def _fetch(self, request: Any) -> Any:
        self.last_count = len(request) if self._auto_collation else 1
        self.last_digest = digest_indices(request)  # the indices are the identities
        if not self._auto_collation:
            return self._collate_fn(self._get(request))
        if self._getitems is not None:
            return self._collate_fn(self._getitems(request))
        if self.seeding[0] is None:
            dataset = self._dataset
            return self._collate_fn([dataset[i] for i in request])
        return self._collate_fn([self._get(i) for i in request])

    def take_skips(self) -> Skips:
        """Samples dropped since the last call (none here)."""
        return NO_SKIPS


class SkippingMapFetcher(MapFetcher):
    """Map-style with ``on_error="skip"``: a sample whose ``__getitem__`` raises is left
    out of its batch and recorded; a request with no sample left raises `BatchSkipped`."""

    def __init__(self, dataset: Any, auto_collation: bool, collate_fn: Callable[[Any], Any]):
        super().__init__(dataset, auto_collation, collate_fn)
        self._skipped: list[SkipRecord] = []

    def _try(self, index: Any) -> tuple[bool, Any]:
        try:
            return True, self._get(index)
        except Exception as error:
            reason = f"{type(error).__name__}: {error}"
            self._skipped.append(SkipRecord("", reason, 1, (f"index {index!r}",)))
            return False, None

    def _fetch(self, request: Any) -> Any:
        self.last_count = 0
        if not self._auto_collation:
            ok, sample = self._try(request)
            if not ok:
                raise BatchSkipped
            self.last_count, self.last_digest = 1, digest_indices(request)
            return self._collate_fn(sample)
        if self._getitems is not None:
            try:
                batch = self._collate_fn(self._getitems(request))
                self.last_count, self.last_digest = len(request), digest_indices(request)
                return batch
            except Exception:
                pass  # find the bad samples one by one
        got = [(index, sample) for index in request for ok, sample in [self._try(index)] if ok]
        if not got:
            raise BatchSkipped
        self.last_count = len(got)
        self.last_digest = digest_indices([index for index, _ in got])  # the delivered ones
        return self._collate_fn([sample for _, sample in got])

    def take_skips(self) -> Skips:
        skipped, self._skipped = self._skipped, []
        return tuple(skipped)


class IterableFetcher:
    """Iterable-style: the request only says how many samples to take (its length).

    The dataset iterator is created on first use, so a worker's ``__iter__`` runs after
    its ``worker_init_fn``. A final partial batch is returned unless ``drop_last``.
    """

    def __init__(
        self,
        dataset: Any,
        auto_collation: bool,
        collate_fn: Callable[[Any], Any],
        drop_last: bool,
    ):
        self._dataset = dataset
        self._auto_collation = auto_collation
        self._collate_fn = collate_fn
        self._drop_last = drop_last
        self._iterator: Iterator[Any] | None = None
        self._pending: SampleError | None = None  # raised after the partial batch before it
        self.ended = False
        self.last_count = 0
        self.last_digest: tuple[int, int] | None = None  # None: identified by position
        identify = getattr(dataset, "identify_last", None)
        self._identify = identify if callable(identify) else None
        self.seeding: tuple[int | None, int] = (None, 0)  # (sample_seed, epoch)
        self.collate_timer: CollateTimer | None = None  # set by make_fetcher

    def take_skips(self) -> Skips:
        """Samples the pipeline skipped (``on_error="skip"``: the process's `SkipSink`)."""
        return tuple(skip_sink().drain())

    @property
    def started(self) -> bool:
        """Whether this epoch's iterator over the dataset exists yet."""
        return self._iterator is not None

    def start(self) -> None:
        """Call ``iter(dataset)`` now rather than at the first fetch."""
        if self._iterator is None and not self.ended:
            self._iterator = iter(self._dataset)

    def state(self) -> Any:
        """The stream's checkpoint (`conveyor.state.stream_state`); None: nothing stateful."""
        try:
            return stream_state.capture(self._dataset, self._iterator)
        except NotPlainData as error:  # a DataPipe refusing an item: see MapFetcher.state
            return error.refused()

    def restore(self, state: Any) -> bool:
        """Continue from ``state``: the dataset's part now, the iterator's after ``iter()``.
        False if nothing here could take it (the caller replays instead)."""
        if not stream_state.can_restore(self._dataset, state):
            return False
        self._iterator = stream_state.restore(self._dataset, state)
        return True

    captured: Any = None  # the stream's state, taken by ``fetch(..., capture=True)``

    def fetch(self, request: Any, capture: bool = False) -> Any:
        """One batch; with ``capture``, the stream's state after it goes to ``captured``
        (taken before collating: the pipeline's own structures are still warm then)."""
        if self._pending is not None:
            error, self._pending = self._pending, None
            raise error
        if self.ended:
            raise StopIteration
        if self._iterator is None:
            self._iterator = iter(self._dataset)
        if self.seeding[0] is None:
            return self._fetch(request, capture)
        with seeding_epoch(*self.seeding):  # a stream passes each sample's identity itself
            return self._fetch(request, capture)

    def _fetch(self, request: Any, capture: bool) -> Any:
        identities: list[int] | None = [] if self._identify is not None else None
        assert self._iterator is not None
        if not self._auto_collation:
            try:
                pulled: Any = next(self._iterator)
            except StopIteration:
                self.ended = True
                raise
            if identities is not None:
                identities.append(self._identify())  # type: ignore[misc]
            self.last_count = 1
            self.last_digest = _stream_digest([pulled], identities)
        else:
            pulled = self._pull(len(request), identities)
            self.last_count = len(pulled)
            self.last_digest = _stream_digest(pulled, identities)
        if capture:
            self.captured = self.state()
        return self._collate_fn(pulled)

    def _pull(self, wanted: int, identities: list[int] | None) -> list[Any]:
        """Up to ``wanted`` samples: fewer at the end of the stream (unless ``drop_last``)
        or before bad data (the complete samples first, the error with the next fetch)."""
        # next() rather than a for loop: a for loop calls iter() on the iterator again, and
        # a dataset whose __iter__ resets itself and returns self would restart every batch.
        assert self._iterator is not None
        samples: list[Any] = []
        identify = self._identify
        while len(samples) < wanted:
            try:
                samples.append(next(self._iterator))
                if identities is not None:
                    identities.append(identify())  # type: ignore[misc]
            except StopIteration:
                self.ended = True
                if not samples or (self._drop_last and len(samples) < wanted):
                    raise
                break
            except SampleError as error:
                if not samples or self._drop_last:
                    raise
                self._pending = error
                break
        return samples


def _stream_digest(samples: list[Any], identities: list[int] | None) -> tuple[int, int] | None:
    """``(digest, count)`` of a stream's batch: by the identities its dataset gave, else by
    the samples' ``__url__``/``__key__``; None (identified by position) if neither."""
    if identities is not None:
        return digest_identities(identities), len(identities)
    return digest_keyed(samples)


def make_fetcher(spec: FetchSpec, dataset: Any, epoch: int = 0) -> MapFetcher | IterableFetcher:
    """The fetcher ``spec`` asks for, over ``dataset`` (this consumer's prepared copy), for
    the loader's epoch ``epoch`` (per-sample generators are seeded from it)."""
    fetcher: MapFetcher | IterableFetcher
    collate = CollateTimer(spec.collate_fn)
    if spec.iterable_style:
        fetcher = IterableFetcher(dataset, spec.auto_collation, collate, spec.drop_last)
    elif spec.skip_bad_samples:
        fetcher = SkippingMapFetcher(dataset, spec.auto_collation, collate)
    else:
        fetcher = MapFetcher(dataset, spec.auto_collation, collate)
    fetcher.seeding = (spec.sample_seed, epoch)
    fetcher.collate_timer = collate
    return fetcher
