"""Loading in the calling thread (``num_workers=0``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conveyor.engine.base_iterator import LoaderIterator
from conveyor.engine.fetch import make_fetcher
from conveyor.engine.plan import LoadPlan


class SingleProcessIterator(LoaderIterator):
    def __init__(self, plan: LoadPlan, len_hint: Callable[[], int | None]):
        super().__init__(plan, len_hint)
        dataset = plan.dataset
        if plan.graph_hook is not None:
            dataset = plan.graph_hook(dataset, 0, 1, self._shared_seed)
        self._fetcher = make_fetcher(
            plan.iterable_style, dataset, plan.auto_collation, plan.collate_fn, plan.drop_last
        )

    def _next_data(self) -> Any:
        request = next(self._sampler_iter)  # may raise StopIteration: the epoch is over
        data = self._fetcher.fetch(request)  # may raise StopIteration: the stream is over
        if self._pin is not None:
            data = self._pin(data)
        return data
