"""Samplers that checkpoint on their own (torchdata's ``stateful_dataloader.sampler``).

Each keeps where it is in the current iteration. ``state_dict()`` may be called at any
point; after ``load_state_dict()`` the *next* iteration replays the checkpointed one
from its start (same random draws) and skips what had been yielded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any, TypeVar

import torch

from conveyor import sampler as plain
from conveyor.distributed import DistributedSampler
from conveyor.state.protocol import Stateful

T = TypeVar("T")
_VERSION = 1

__all__ = ["BatchSampler", "RandomSampler", "StatefulDistributedSampler"]


def _check(state: Mapping[str, Any], who: str) -> None:
    if state.get("version") != _VERSION:
        raise ValueError(f"{who} state has version {state.get('version')!r}, expected {_VERSION}")


class _Counting:
    """Yielded-count bookkeeping shared by the stateful samplers."""

    def _init_counting(self) -> None:
        self._yielded = 0
        self._skip = 0

    def _count(self, items: Iterator[T]) -> Iterator[T]:
        skip, self._skip = self._skip, 0
        self._yielded = 0
        for item in items:
            self._yielded += 1
            if self._yielded > skip:
                yield item


class RandomSampler(plain.RandomSampler, _Counting):
    """`conveyor.RandomSampler` plus ``state_dict``/``load_state_dict``."""

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(data_source, replacement, num_samples, generator)
        self._init_counting()
        self._start: torch.Tensor | None = None  # generator state when this iteration began
        self._restore: torch.Tensor | None = None

    def _epoch_generator(self) -> torch.Generator:
        generator = super()._epoch_generator()
        if self._restore is not None:
            generator.set_state(self._restore)
            self._restore = None
        self._start = generator.get_state()
        return generator

    def __iter__(self) -> Iterator[int]:
        return self._count(super().__iter__())

    def state_dict(self) -> dict[str, Any]:
        return {"version": _VERSION, "generator": self._start, "yielded": self._yielded}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        _check(state_dict, "RandomSampler")
        self._restore = state_dict["generator"]
        self._skip = int(state_dict["yielded"])


class BatchSampler(plain.BatchSampler, _Counting):
    """`conveyor.BatchSampler` plus ``state_dict``/``load_state_dict`` (counts batches)."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self._init_counting()
        self._inner_start: Any = None

    def __iter__(self) -> Iterator[list[int]]:
        inner = self.sampler
        self._inner_start = inner.state_dict() if isinstance(inner, Stateful) else None
        return self._count(self._pull_one_by_one(inner))

    def state_dict(self) -> dict[str, Any]:
        return {"version": _VERSION, "sampler": self._inner_start, "yielded": self._yielded}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        _check(state_dict, "BatchSampler")
        inner = state_dict.get("sampler")
        if inner is not None and isinstance(self.sampler, Stateful):
            self.sampler.load_state_dict(inner)
        self._skip = int(state_dict["yielded"])


class StatefulDistributedSampler(DistributedSampler[T], _Counting):
    """`conveyor.DistributedSampler` plus ``state_dict``/``load_state_dict``.

    Its order depends only on ``(seed, epoch)``, so the state is the epoch and a count.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_counting()

    def __iter__(self) -> Iterator[T]:
        return self._count(super().__iter__())

    def state_dict(self) -> dict[str, Any]:
        return {"version": _VERSION, "epoch": self.epoch, "yielded": self._yielded}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        _check(state_dict, "StatefulDistributedSampler")
        self.epoch = int(state_dict["epoch"])
        self._skip = int(state_dict["yielded"])
