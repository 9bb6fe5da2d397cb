"""`StatefulDataLoader` with torchdata's constructor, samplers and state layout."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, TypeVar

from conveyor import sampler as plain
from conveyor.dataloader import DataLoader
from conveyor.dataset import Dataset
from conveyor.state.loader_state import LoaderStateDict
from conveyor.stateful_dataloader.sampler import BatchSampler, RandomSampler
from conveyor.stateful_dataloader.torchdata_state import (
    CONVEYOR_KEY,
    from_json,
    from_torchdata,
    to_json,
    torchdata_view,
)

T_co = TypeVar("T_co", covariant=True)

_SIGNATURE = inspect.signature(DataLoader.__init__)


class StatefulDataLoader(DataLoader[T_co]):
    """Same as `torchdata.stateful_dataloader.StatefulDataLoader`.

    As torchdata: with ``shuffle=True`` and no sampler given, the sampler is the stateful
    `RandomSampler` (its own generator, seeded once from torch's global RNG unless
    ``generator`` is given) and batches come from the stateful `BatchSampler`.

    ``state_dict()`` has torchdata's keys (``_num_yielded``, ``_sampler_iter_yielded``,
    ``_index_sampler_state`` with ``samples_yielded``, ``_iterator_finished``, ...), which
    frameworks read and adjust (accelerate lowers ``_num_yielded`` for its prefetch), plus
    conveyor's own exact checkpoint under ``"_conveyor"``; it is JSON-serialisable.
    ``load_state_dict()`` takes conveyor's states (honouring an adjusted
    ``_num_yielded``) and torchdata 0.11's for map-style datasets: a run started with
    torchdata continues here with the same batches. Differences:
        snapshot_every_n_steps: how often workers send their stream's state, as in
            torchdata (default 1: every batch; 0: never); every step's checkpoint is exact
            anyway (a resume reads again the batches delivered since a worker's last state).
        A torchdata checkpoint of an iterable-style dataset is refused (`ValueError`):
            its worker states are torchdata's private format.
    """

    def __init__(
        self,
        dataset: Dataset[T_co],
        *args: Any,
        snapshot_every_n_steps: int | None = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, *args, snapshot_every_n_steps=snapshot_every_n_steps, **kwargs)
        self._held_iterator: Any = None
        given = _SIGNATURE.bind(self, dataset, *args, **kwargs).arguments
        if given.get("sampler") is None and given.get("batch_sampler") is None:
            self._use_stateful_samplers(dataset, given.get("generator"))

    def _use_stateful_samplers(self, dataset: Any, generator: Any) -> None:
        """torchdata's substitution, after torch's argument checks have passed."""
        if self._options.data.iterable_style:
            return
        # The facade forbids setting these after __init__; this is still construction.
        if type(self.sampler) is plain.RandomSampler:
            object.__setattr__(self, "sampler", RandomSampler(dataset, generator=generator))
        if type(self.batch_sampler) is plain.BatchSampler:
            assert self.batch_size is not None
            stateful = BatchSampler(self.sampler, self.batch_size, self.drop_last)
            object.__setattr__(self, "batch_sampler", stateful)

    def __iter__(self) -> Any:
        """As torchdata's loader, hold the epoch's iterator: ``state_dict()`` after leaving
        the loop (``break``) describes where the user stopped. The previous epoch's iterator
        is released (and its workers stopped) when the next one starts."""
        self._held_iterator = None
        iterator = super().__iter__()
        self._held_iterator = iterator
        return iterator

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """torchdata's layout, JSON-serialisable; conveyor's exact state under "_conveyor"."""
        ours = super().state_dict()
        view = torchdata_view(
            ours, self._index_sampler, self.num_workers, self._options.data.iterable_style
        )
        view[CONVEYOR_KEY] = ours
        encoded: dict[str, Any] = to_json(view)  # one walk over everything
        return encoded

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a state of this class, or from torchdata 0.11's (map-style)."""
        if not state_dict:
            return  # torchdata: an empty state leaves the loader as it is
        saved = state_dict.get(CONVEYOR_KEY)
        if saved is None:
            ours: LoaderStateDict = from_torchdata(state_dict, self)
        else:
            ours = from_json(saved)
            if ours.get("in_epoch") and "_num_yielded" in state_dict:
                ours["yielded"] = int(state_dict["_num_yielded"])  # e.g. lowered by accelerate
        super().load_state_dict(ours)
