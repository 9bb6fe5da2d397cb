"""`StatefulDataLoader` with torchdata's constructor and state semantics."""

from __future__ import annotations

from typing import Any, TypeVar

from conveyor.dataloader import DataLoader
from conveyor.dataset import Dataset

T_co = TypeVar("T_co", covariant=True)


class StatefulDataLoader(DataLoader[T_co]):
    """Same as `torchdata.stateful_dataloader.StatefulDataLoader`.

    ``state_dict()`` describes the batches the user has received; ``load_state_dict()``
    makes the next ``iter()`` continue from there. Differences:
        snapshot_every_n_steps: accepted and validated, but every step is exact here:
            the state is a few counters plus one RNG snapshot per epoch, so there is
            nothing to amortise.
        Map-style datasets resume with any ``num_workers``; streams need the same count.
        Samplers need no ``state_dict``: shuffles are replayed from the loader's RNG
        snapshot. Stateful samplers and datasets are still honoured.
    """

    def __init__(
        self,
        dataset: Dataset[T_co],
        *args: Any,
        snapshot_every_n_steps: int | None = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, *args, snapshot_every_n_steps=snapshot_every_n_steps, **kwargs)
