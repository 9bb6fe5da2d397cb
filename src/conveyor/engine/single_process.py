"""Loading in the calling thread (``num_workers=0``)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from conveyor.collate import set_output_allocator
from conveyor.engine.base_iterator import LoaderIterator
from conveyor.engine.fetch import BatchSkipped, IterableFetcher, make_fetcher
from conveyor.engine.placed import is_placed, place
from conveyor.engine.plan import LoadPlan
from conveyor.formats.errors import SampleError
from conveyor.formats.skips import skip_sink
from conveyor.state.loader_state import LoaderStateDict, Resume, stream_resume_for
from conveyor.torch_compat import TorchSingleProcessLoaderIter
from conveyor.transport.recycled import RecycledBuffers


class SingleProcessIterator(LoaderIterator, TorchSingleProcessLoaderIter):
    """One epoch in the calling thread; torch's ``_SingleProcessDataLoaderIter`` for
    ``isinstance`` (none of its code runs)."""

    def __init__(
        self, plan: LoadPlan, len_hint: Callable[[], int | None], resume: Resume | None = None
    ):
        super().__init__(plan, len_hint, resume)
        hooks = plan.hooks
        dataset = self._data.dataset
        if hooks.prepare_graph is not None:
            dataset = hooks.prepare_graph(dataset, 0, 1, self._shared_seed)
        self._dataset = dataset
        if is_placed(dataset):  # the one consumer: every position of this rank
            place(dataset, 0, 1, self.world, self._data.samples_per_request)
        self._fetcher = make_fetcher(self._options.fetch_spec(), dataset)
        self._buffers = RecycledBuffers()  # big batches reuse warm memory (S1)
        if resume is not None and self._data.iterable_style:
            self._resume_stream(resume)
        elif resume is not None and resume.state.get("dataset") is not None:
            self._fetcher.restore(resume.state["dataset"])  # a map-style dataset's own state
        if isinstance(self._fetcher, IterableFetcher):
            self._fetcher.start()  # iter(dataset) now, as torch: its state is the epoch's start
        if hooks.stage_timers is not None:
            timers = hooks.stage_timers(dataset)
            timers.install()
            self.clock.stage_source = timers.snapshot

    def _resume_stream(self, resume: Resume) -> None:
        """Streams seek with their own state when they have one; otherwise replay."""
        streams = stream_resume_for(True, 0, resume, self.world)  # None: same topology
        saved = resume.state.get("dataset")
        if streams is not None and streams.states[0] is not None:
            saved = pickle.loads(streams.states[0])  # merged from another topology
        if isinstance(self._fetcher, IterableFetcher) and self._fetcher.restore(saved):
            return
        for _ in range(resume.yielded):  # no state: read and drop, as torch users must
            try:
                self._fetcher.fetch(next(self._sampler_iter))
            except StopIteration:
                break

    def _epoch_state(self) -> LoaderStateDict:
        state = super()._epoch_state()
        captured = self._fetcher.state()
        if captured is not None:
            state["dataset"] = captured
        return state

    def _stream_end(self) -> dict[str, Any] | None:
        if not isinstance(self._fetcher, IterableFetcher):
            return None
        state = self._fetcher.state()
        return None if state is None else {"dataset": state}

    def _next_data(self) -> Any:
        while True:
            _, request = self._next_request()  # may raise StopIteration: the epoch is over
            previous = set_output_allocator(self._buffers.allocate)
            try:
                # pipelines leave the warning to this loader's ledger
                with skip_sink().forwarded():
                    data = self._fetcher.fetch(request)  # StopIteration: the stream is over
            except (StopIteration, SampleError):
                self._record_skips(self._fetcher.take_skips())
                raise
            except BatchSkipped:
                self._record_skips(self._fetcher.take_skips())
                continue
            finally:
                set_output_allocator(previous)
            self._record_skips(self._fetcher.take_skips())
            break
        self._batch_samples = self._fetcher.last_count
        if self._pin is not None:
            data = self._pin(data)
        return data
