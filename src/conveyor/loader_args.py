"""DataLoader's dataset and sampler arguments: torch's checks and defaults, torch's messages.

`resolve_sampling` turns ``(dataset, batch_size, shuffle, sampler, batch_sampler,
drop_last, generator, collate_fn)`` into the loader's `DataOptions`; the other concerns
check themselves (`conveyor.engine.loop.options`, `conveyor.engine.workers.worker_kind`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeGuard

import torch

from conveyor.collate import default_collate, default_convert
from conveyor.engine.loop.options import DataOptions
from conveyor.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from conveyor.torch_compat import TorchIterDataPipe

if TYPE_CHECKING:
    from conveyor.datapipes.base import IterDataPipe

__all__ = ["InfiniteConstantSampler", "is_datapipe", "resolve_sampling"]


def is_datapipe(dataset: Any) -> TypeGuard[IterDataPipe[Any]]:
    """Whether ``dataset`` is an iterable DataPipe graph the loader seeds, shuffles and
    shards: conveyor's, or torch's own (``torch.utils.data.datapipes``, torchdata's), as
    torch's DataLoader treats its DataPipes. Checked without importing conveyor's
    DataPipes: until their module is imported no object can be one (S4)."""
    if isinstance(dataset, TorchIterDataPipe):
        return True
    base = sys.modules.get("conveyor.datapipes.base")
    return base is not None and isinstance(dataset, base.IterDataPipe)


class InfiniteConstantSampler(Sampler[None]):
    """Yields ``None`` forever: iterable-style datasets ignore indices."""

    def __iter__(self) -> Any:
        while True:
            yield None


def _check_stream_arguments(
    dataset: Any, shuffle: bool | None, sampler: Any, batch_sampler: Any
) -> None:
    """Iterable-style datasets take no sampler; DataPipe graphs take ``shuffle``."""
    if is_datapipe(dataset):
        if shuffle is not None:
            # Imported here: it pulls in every DataPipe operation (`import conveyor` time).
            from conveyor.datapipes.settings import apply_shuffle_settings

            apply_shuffle_settings(dataset, shuffle=shuffle)
    elif shuffle not in (False, None):
        raise ValueError(
            "DataLoader with IterableDataset: expected unspecified shuffle option, "
            f"but got shuffle={shuffle}"
        )
    if sampler is not None:
        raise ValueError(
            "DataLoader with IterableDataset: expected unspecified sampler option, "
            f"but got sampler={sampler}"
        )
    if batch_sampler is not None:
        raise ValueError(
            "DataLoader with IterableDataset: expected unspecified batch_sampler option, "
            f"but got batch_sampler={batch_sampler}"
        )


def _default_sampler(
    dataset: Any, iterable_style: bool, shuffle: bool, generator: torch.Generator | None
) -> Sampler[Any]:
    if iterable_style:
        return InfiniteConstantSampler()
    if shuffle:
        return RandomSampler(dataset, generator=generator)
    return SequentialSampler(dataset)


def resolve_sampling(
    dataset: Any,
    iterable_style: bool,
    batch_size: int | None,
    shuffle: bool | None,
    sampler: Sampler[Any] | Iterable[Any] | None,
    batch_sampler: Sampler[list[Any]] | Iterable[list[Any]] | None,
    drop_last: bool,
    generator: torch.Generator | None,
    collate_fn: Callable[[Any], Any] | None,
) -> DataOptions:
    """torch's rules: mutual exclusions, default samplers, the batch sampler, collate."""
    if generator is not None and not isinstance(generator, torch.Generator):
        # torch fails later, inside the sampler, with a message about random_()'s arguments
        raise TypeError(
            f"generator must be a torch.Generator (or None), got {type(generator).__name__}: "
            "create one with torch.Generator().manual_seed(seed)"
        )
    if iterable_style:
        _check_stream_arguments(dataset, shuffle, sampler, batch_sampler)
    else:
        shuffle = bool(shuffle)
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError(
                "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                "sampler, and drop_last"
            )
        batch_size = None
        drop_last = False
    if sampler is None:
        sampler = _default_sampler(dataset, iterable_style, bool(shuffle), generator)
    if batch_size is not None and batch_sampler is None:
        batch_sampler = BatchSampler(sampler, batch_size, drop_last)
    if collate_fn is None:
        collate_fn = default_collate if batch_sampler is not None else default_convert
    return DataOptions(
        dataset=dataset,
        sampler=sampler,
        batch_sampler=batch_sampler,
        batch_size=batch_size,
        drop_last=drop_last,
        collate_fn=collate_fn,
        generator=generator,
        iterable_style=iterable_style,
        is_graph=is_datapipe(dataset),
    )
