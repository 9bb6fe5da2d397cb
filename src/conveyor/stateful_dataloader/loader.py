"""`StatefulDataLoader` with torchdata's constructor, samplers and state layout."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import torch

from conveyor import sampler as plain
from conveyor.dataloader import DataLoader
from conveyor.dataset import Dataset
from conveyor.engine.loop.autotune import AutotuneOptions
from conveyor.engine.workers.worker_kind import MultiprocessingContext
from conveyor.sampler import Sampler
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
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler[Any] | Iterable[Any] | None = None,
        batch_sampler: Sampler[list[Any]] | Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[T_co]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: str | MultiprocessingContext | None = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        snapshot_every_n_steps: int | None = 1,
        worker_type: str | None = None,
        worker_method: str | None = None,
        fullsync: bool = False,
        on_error: str = "raise",
        max_skipped: int | None = None,
        profile_stages: bool = False,
        ray_remote_args: dict[str, Any] | None = None,
        max_worker_restarts: int | None = None,
        share_records: bool | None = None,
        sample_seed: int | None = None,
        autotune: bool | AutotuneOptions = False,
    ) -> None:
        # torchdata's parameters, in torchdata's order (code validates keyword arguments
        # against this signature: torchtitan), then conveyor's, keyword-only.
        # snapshot_every_n_steps: torchdata takes 0 ("snapshot only when asked"); every
        # step is exact here anyway.
        super().__init__(
            dataset,
            batch_size,
            shuffle,
            sampler,
            batch_sampler,
            num_workers,
            collate_fn,
            pin_memory,
            drop_last,
            timeout,
            worker_init_fn,
            multiprocessing_context,
            generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
            snapshot_every_n_steps=snapshot_every_n_steps,
            worker_type=worker_type,
            worker_method=worker_method,
            fullsync=fullsync,
            on_error=on_error,
            max_skipped=max_skipped,
            profile_stages=profile_stages,
            ray_remote_args=ray_remote_args,
            max_worker_restarts=max_worker_restarts,
            share_records=share_records,
            sample_seed=sample_seed,
            autotune=autotune,
        )
        self._conveyor_held_iterator: Any = None
        if sampler is None and batch_sampler is None:
            self._use_stateful_samplers(dataset, generator)

    def _use_stateful_samplers(self, dataset: Any, generator: Any) -> None:
        """torchdata's substitution, after torch's argument checks have passed."""
        options = self._conveyor_options
        data = options.data
        if data.iterable_style:
            return
        sampler, batch_sampler = data.sampler, data.batch_sampler
        if type(sampler) is plain.RandomSampler:
            sampler = RandomSampler(dataset, generator=generator)
        if type(batch_sampler) is plain.BatchSampler:
            assert data.batch_size is not None
            batch_sampler = BatchSampler(sampler, data.batch_size, data.drop_last)
        # The facade forbids setting these after __init__; this is still construction.
        changed = options.changed("data", sampler=sampler, batch_sampler=batch_sampler)
        self.__dict__.update(
            _conveyor_options=changed, sampler=sampler, batch_sampler=batch_sampler
        )

    def __iter__(self) -> Any:
        """As torchdata's loader, hold the epoch's iterator: ``state_dict()`` after leaving
        the loop (``break``) describes where the user stopped. The previous epoch's iterator
        is released (and its workers stopped) when the next one starts."""
        self._conveyor_held_iterator = None
        iterator = super().__iter__()
        self._conveyor_held_iterator = iterator
        return iterator

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """torchdata's layout, JSON-serialisable; conveyor's exact state under "_conveyor"."""
        ours = super().state_dict()
        view = torchdata_view(
            ours, self._index_sampler, self.num_workers, self._conveyor_options.data.iterable_style
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
