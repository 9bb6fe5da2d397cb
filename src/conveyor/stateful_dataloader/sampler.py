"""Samplers that checkpoint on their own: torchdata's ``stateful_dataloader.sampler``.

Same attributes and state layout as torchdata 0.11, so checkpoints move between the two
libraries and code that reads or patches them (accelerate) keeps working:

- `StatefulDistributedSampler`: ``{"yielded": n}`` (JSON-serialisable); ``yielded`` counts
  the indices handed out this iteration, ``next_yielded`` is the count the next iteration
  resumes from after ``load_state_dict``.
- `RandomSampler`: ``{"yielded": n, "generator": <generator state when this iteration
  began>}``; without a ``generator`` it makes one, seeded once from torch's global RNG.
- `BatchSampler`: ``{"samples_yielded": n, "sampler_state": <the inner sampler's state>}``
  (torchdata keeps this on its batch iterator; here the sampler answers for it).

``state_dict()`` may be called at any point; after ``load_state_dict()`` the *next*
iteration continues where the saved one was. An iteration's bookkeeping starts when
``iter()`` is called (torchdata: at the first ``next()``), so a state taken right after
``iter()`` already describes the new iteration.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any, TypeVar, cast

import torch

from conveyor import sampler as plain
from conveyor.distributed import DistributedSampler
from conveyor.state.protocol import Stateful, has_state

T = TypeVar("T")

__all__ = ["BatchSampler", "RandomSampler", "StatefulDistributedSampler"]

_REPLACEMENT_DRAW = 32  # torchdata draws indices with replacement 32 at a time


class _Counted:
    """``yielded`` / ``next_yielded`` bookkeeping shared by the stateful samplers."""

    yielded: int
    next_yielded: int | None

    def _start(self) -> int:
        """Begin an iteration: resume from ``next_yielded`` once, else from 0."""
        start, self.next_yielded = self.next_yielded or 0, None
        self.yielded = start
        return start

    def _counting(self, items: Iterator[T], skip: int) -> Iterator[T]:
        for item in itertools.islice(items, skip, None):
            self.yielded += 1
            yield item


class RandomSampler(plain.RandomSampler, _Counted):
    """`conveyor.RandomSampler` with torchdata's state (``yielded`` and ``generator``).

    As torchdata's: with ``generator=None`` one generator is made at construction, seeded
    from torch's global RNG, and later iterations continue its stream.
    """

    _GENERATOR = "generator"
    _YIELDED = "yielded"

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        if generator is None:
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
            generator = torch.Generator()
            generator.manual_seed(seed)
        super().__init__(data_source, replacement, num_samples, generator)
        self.yielded = 0
        self.next_yielded = None
        self.generator_state = generator.get_state()

    def _chunks(self) -> Iterator[list[int]]:
        """torchdata's draws: a permutation (or 32 draws with replacement) each time the
        last one runs out, and none beyond the epoch's end (torch draws one more)."""
        n = len(self.data_source)
        if n == 0:
            raise ValueError("RandomSampler cannot draw num_samples from an empty data_source")
        generator = self.generator
        left = self.num_samples
        while left > 0:
            if self.replacement:
                drawn = torch.randint(
                    n, (_REPLACEMENT_DRAW,), dtype=torch.int64, generator=generator
                )
            else:
                drawn = torch.randperm(n, generator=generator)
            chunk: list[int] = drawn[:left].tolist()
            left -= len(chunk)
            yield chunk

    def __iter__(self) -> Iterator[int]:
        assert self.generator is not None
        skip = self._start()
        self.generator_state = self.generator.get_state()
        chunks = self._chunks()
        first = next(chunks, [])  # drawn now, as torchdata draws at iter(): same stream order
        return self._counting(itertools.chain(first, itertools.chain.from_iterable(chunks)), skip)

    def state_dict(self) -> dict[str, Any]:
        return {self._YIELDED: self.yielded, self._GENERATOR: self.generator_state}

    def next_epoch_state(self) -> dict[str, Any]:
        """The state that starts the next epoch where this one left the generator (what a
        loader checkpoints between epochs)."""
        assert self.generator is not None
        return {self._YIELDED: 0, self._GENERATOR: self.generator.get_state()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        _check_yielded(state_dict, self._YIELDED)
        assert self.generator is not None
        saved = state_dict[self._GENERATOR]
        if not isinstance(saved, torch.Tensor):
            saved = torch.tensor(saved, dtype=torch.uint8)
        self.generator.set_state(saved)
        self.next_yielded = int(state_dict[self._YIELDED])


class BatchSampler(plain.BatchSampler):
    """`conveyor.BatchSampler` with torchdata's state: ``samples_yielded`` and the inner
    sampler's state. An inner sampler without state is replayed (its first
    ``samples_yielded`` indices are skipped), as torchdata does."""

    _SAMPLES_YIELDED = "samples_yielded"
    _SAMPLER_STATE = "sampler_state"

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.samples_yielded = 0
        self._resume_samples: int | None = None

    def __iter__(self) -> Iterator[list[int]]:
        skip, self._resume_samples = self._resume_samples or 0, None
        self.samples_yielded = skip
        indices: Iterator[int] = iter(self.sampler)
        if skip and not has_state(self.sampler):
            indices = itertools.islice(indices, skip, None)
        return self._count(self._pull_one_by_one(indices))

    def _count(self, batches: Iterator[list[int]]) -> Iterator[list[int]]:
        for batch in batches:
            self.samples_yielded += len(batch)
            yield batch

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {self._SAMPLES_YIELDED: self.samples_yielded}
        if has_state(self.sampler):
            state[self._SAMPLER_STATE] = cast(Stateful, self.sampler).state_dict()
        return state

    def next_epoch_state(self) -> dict[str, Any]:
        """The state that starts the next epoch (see `RandomSampler.next_epoch_state`)."""
        state: dict[str, Any] = {self._SAMPLES_YIELDED: 0}
        following = getattr(self.sampler, "next_epoch_state", None)
        if callable(following):
            state[self._SAMPLER_STATE] = following()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if self._SAMPLES_YIELDED not in state_dict:
            raise ValueError(f"Invalid state_dict: no {self._SAMPLES_YIELDED!r}")
        inner = state_dict.get(self._SAMPLER_STATE)
        if inner is not None and has_state(self.sampler):
            cast(Stateful, self.sampler).load_state_dict(inner)
        self._resume_samples = int(state_dict[self._SAMPLES_YIELDED])


class StatefulDistributedSampler(DistributedSampler[T], _Counted):
    """`conveyor.DistributedSampler` with torchdata's state: ``{"yielded": n}``.

    The order depends only on ``(seed, epoch)``; call ``set_epoch`` as usual before
    resuming (torchdata's state does not hold the epoch either).
    """

    _YIELDED = "yielded"

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, drop_last)
        self.yielded = 0
        self.next_yielded = None

    def __iter__(self) -> Iterator[T]:
        skip = self._start()
        return self._counting(super().__iter__(), skip)

    def state_dict(self) -> dict[str, Any]:
        return {self._YIELDED: self.yielded}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        _check_yielded(state_dict, self._YIELDED)
        self.next_yielded = int(state_dict[self._YIELDED])


def _check_yielded(state_dict: Mapping[str, Any], key: str) -> None:
    if key not in state_dict:
        raise ValueError("Invalid state_dict")
    if state_dict[key] < 0:
        raise ValueError("Cannot load state_dict with negative yielded value")
