"""Samplers: same names, arguments and random draws as ``torch.utils.data.sampler``.

Given the same `torch.Generator` state (or the same ``torch.manual_seed``), every sampler
here yields the same indices in the same order as torch's, and makes the same draws at the
same moments (lazily, on the first ``next()``), so the generator is left in the same state.

Speed: the random samplers (and `DistributedSampler`) produce their indices as whole lists
("chunks": one ``randperm(n).tolist()``, one ``randint(32)`` draw, ...). Iterating one
chains the chunks in C, and `BatchSampler` cuts batches out of them by slicing instead of
pulling one index at a time through a Python generator.
"""

from __future__ import annotations

import itertools
from abc import ABCMeta
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import Any, TypeVar, cast

import torch

from conveyor.torch_compat import (
    TorchBatchSampler,
    TorchRandomSampler,
    TorchSampler,
    TorchSequentialSampler,
    TorchSubsetRandomSampler,
    TorchWeightedRandomSampler,
    recognises_torch_class,
)

T_co = TypeVar("T_co", covariant=True)
SamplerClass = TypeVar("SamplerClass", bound="type[Sampler[Any]]")

__all__ = [
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
]

_REPLACEMENT_DRAW = 32  # torch draws indices with replacement 32 at a time
_LIST_CHUNK = 1 << 16  # indices turned into Python ints at a time

# ``__iter__`` implementations known to equal ``chain.from_iterable(self._chunks())``.
_CHUNKED_ITERS: set[Callable[..., Any]] = set()


def _chunked(cls: SamplerClass) -> SamplerClass:
    """Declare that ``cls.__iter__`` yields exactly the items of ``cls._chunks()``."""
    _CHUNKED_ITERS.add(cls.__iter__)
    return cls


class Sampler(TorchSampler[T_co], metaclass=ABCMeta):
    """Base class of index samplers. Same as `torch.utils.data.Sampler` (and a subclass of it,
    as is every sampler here; every torch sampler is an instance of this class too).

    Subclasses implement ``__iter__`` and may implement ``__len__``. There is deliberately
    no default ``__len__``: ``list(sampler)`` and friends fall back to ``__iter__`` only
    when ``__len__`` is missing.
    """

    @classmethod
    def __subclasshook__(cls, subclass: type) -> Any:
        return recognises_torch_class(cls, Sampler, TorchSampler, subclass)

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError


class SequentialSampler(Sampler[int], TorchSequentialSampler):
    """``0, 1, ..., len(data_source) - 1``. Same as `torch.utils.data.SequentialSampler`.

    Args:
        data_source: the dataset to index (only its ``len()`` is used).
    """

    data_source: Sized

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _as_lists(indices: torch.Tensor) -> Iterator[list[int]]:
    """``indices`` as Python lists of at most `_LIST_CHUNK` items, made as they are needed:
    the first batch of an epoch over 10 M samples waits for 64 K ints, not 10 M (S4)."""
    for start in range(0, len(indices), _LIST_CHUNK):
        yield indices[start : start + _LIST_CHUNK].tolist()


class _ChunkedSampler(Sampler[int]):
    """A sampler whose indices come from a lazy generator of index lists."""

    def __iter__(self) -> Iterator[int]:
        return itertools.chain.from_iterable(self._chunks())

    def _chunks(self) -> Iterator[list[int]]:
        raise NotImplementedError


_chunked(_ChunkedSampler)


def _own_generator() -> torch.Generator:
    """A fresh generator seeded from the global RNG, exactly as torch's RandomSampler does."""
    seed = int(torch.empty((), dtype=torch.int64).random_().item())
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


class RandomSampler(_ChunkedSampler, TorchRandomSampler):
    """Random indices. Same as `torch.utils.data.RandomSampler`.

    Without replacement, ``num_samples > len(data_source)`` concatenates fresh permutations.
    With ``generator=None`` each epoch seeds its own generator from the global RNG.
    Difference: an empty ``data_source`` with an explicit ``num_samples`` raises
    `ValueError` on iteration (torch: `ZeroDivisionError` or `RuntimeError`).

    Args:
        data_source: the dataset to sample (only its ``len()`` is used).
        replacement: draw with replacement.
        num_samples: indices per epoch (default ``len(data_source)``).
        generator: the `torch.Generator` to draw from (default: one seeded from the global RNG
            each epoch).
    """

    data_source: Sized
    replacement: bool

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(
                f"replacement should be a boolean value, but got replacement={replacement}"
            )
        count = self.num_samples
        if not isinstance(count, int) or count <= 0:
            raise ValueError(
                f"num_samples should be a positive integer value, but got num_samples={count}"
            )

    @property
    def num_samples(self) -> int:
        """Indices per epoch: ``num_samples`` if given, else the current dataset length."""
        if self._num_samples is None:
            return len(self.data_source)
        return self._num_samples

    def _chunks(self) -> Iterator[list[int]]:
        n = len(self.data_source)
        if n == 0:
            raise ValueError("RandomSampler cannot draw num_samples from an empty data_source")
        generator = self._epoch_generator()
        count = self.num_samples
        if self.replacement:
            full, rest = divmod(count, _REPLACEMENT_DRAW)
            for size in itertools.chain(itertools.repeat(_REPLACEMENT_DRAW, full), (rest,)):
                yield torch.randint(n, (size,), dtype=torch.int64, generator=generator).tolist()
            return
        for _ in range(count // n):
            yield from _as_lists(torch.randperm(n, generator=generator))
        # torch draws this last permutation even when it keeps none of it.
        yield from _as_lists(torch.randperm(n, generator=generator)[: count % n])

    def _epoch_generator(self) -> torch.Generator:
        """The generator this iteration draws from (a hook for stateful subclasses)."""
        return self.generator if self.generator is not None else _own_generator()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(_ChunkedSampler, TorchSubsetRandomSampler):
    """``indices`` in random order. Same as `torch.utils.data.SubsetRandomSampler`.

    Args:
        indices: the indices to shuffle.
        generator: the `torch.Generator` to draw from (default: the global RNG).
    """

    indices: Sequence[int]

    def __init__(self, indices: Sequence[int], generator: torch.Generator | None = None) -> None:
        self.indices = indices
        self.generator = generator

    def _chunks(self) -> Iterator[list[int]]:
        order = torch.randperm(len(self.indices), generator=self.generator).tolist()
        yield list(map(self.indices.__getitem__, order))

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(_ChunkedSampler, TorchWeightedRandomSampler):
    """Indices drawn with probability proportional to ``weights``.

    Same as `torch.utils.data.WeightedRandomSampler`. Difference: weights that
    `torch.multinomial` would reject on the first ``next()`` (negative, NaN or infinite,
    all zero, too few non-zero without replacement) raise `ValueError` at construction.

    Args:
        weights: one weight per index (need not sum to 1).
        num_samples: indices per epoch.
        replacement: draw with replacement (without: each index at most once).
        generator: the `torch.Generator` to draw from (default: the global RNG).
    """

    weights: torch.Tensor
    num_samples: int
    replacement: bool

    def __init__(
        self,
        weights: Sequence[float] | torch.Tensor,
        num_samples: int,
        replacement: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            message = "num_samples should be a positive integer value, but got num_samples="
            raise ValueError(f"{message}{num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(
                f"replacement should be a boolean value, but got replacement={replacement}"
            )
        weights_tensor = torch.as_tensor(weights, dtype=torch.double)
        if weights_tensor.dim() != 1:
            raise ValueError(
                "weights should be a 1d sequence but given "
                f"weights have shape {tuple(weights_tensor.shape)}"
            )
        _check_weights(weights_tensor, num_samples, replacement)
        self.weights = weights_tensor
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def _chunks(self) -> Iterator[list[int]]:
        drawn = torch.multinomial(
            self.weights, self.num_samples, self.replacement, generator=self.generator
        )
        yield drawn.tolist()

    def __len__(self) -> int:
        return self.num_samples


def _check_weights(weights: torch.Tensor, num_samples: int, replacement: bool) -> None:
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        raise ValueError("weights must be finite and non-negative")
    positive = int((weights > 0).sum())
    if positive == 0:
        raise ValueError("weights must contain at least one positive value")
    if not replacement and num_samples > positive:
        raise ValueError(
            f"num_samples={num_samples} is more than the {positive} indices with a positive "
            "weight; pass replacement=True or lower num_samples"
        )


class BatchSampler(Sampler[list[int]], TorchBatchSampler):
    """Groups another sampler's indices into lists. Same as `torch.utils.data.BatchSampler`.

    ``sampler`` may be any iterable of indices; the built-in random samplers and
    `DistributedSampler` take a fast path that slices their index lists into batches.

    Args:
        sampler: the indices to group (any iterable of indices).
        batch_size: indices per batch.
        drop_last: drop the last batch when it has fewer than ``batch_size`` indices.
    """

    def __init__(
        self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        sampler = self.sampler
        # getattr: an old-style iterable (``__getitem__`` only) has no ``__iter__``.
        if getattr(type(sampler), "__iter__", None) in _CHUNKED_ITERS:
            return self._slice_lists(cast(_ChunkedSampler, sampler)._chunks())
        return self._pull_one_by_one(sampler)

    def _pull_one_by_one(self, sampler: Iterable[int]) -> Iterator[list[int]]:
        indices = iter(sampler)  # on the first next(), as in torch
        size = self.batch_size
        if self.drop_last:
            # zip over ``size`` references to one iterator takes ``size`` items per tuple
            # and stops before a short tuple.
            yield from map(list, zip(*[indices] * size, strict=False))
            return
        batch = list(itertools.islice(indices, size))
        while batch:
            yield batch
            batch = list(itertools.islice(indices, size))

    def _slice_lists(self, chunks: Iterator[list[int]]) -> Iterator[list[int]]:
        size = self.batch_size
        carry: list[int] = []
        for chunk in chunks:
            start = 0
            if carry:
                start = size - len(carry)
                carry.extend(chunk[:start])
                if len(carry) < size:
                    continue
                yield carry
                carry = []
            end = len(chunk)
            stop = end - (end - start) % size
            cut = map(slice, range(start, stop, size), range(start + size, stop + size, size))
            yield from map(chunk.__getitem__, cut)
            carry = chunk[stop:]
        if carry and not self.drop_last:
            yield carry

    def __len__(self) -> int:
        count = len(cast(Sized, self.sampler))
        if self.drop_last:
            return count // self.batch_size
        return (count + self.batch_size - 1) // self.batch_size
