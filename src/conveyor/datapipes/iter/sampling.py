"""``Sampler``: the indices a sampler draws over a sized DataPipe (torch's SamplerIterDataPipe)."""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

from conveyor.datapipes.base import IterDataPipe
from conveyor.sampler import Sampler as IndexSampler
from conveyor.sampler import SequentialSampler

__all__ = ["Sampler"]


class Sampler(IterDataPipe[Any]):
    """Yields what ``sampler(*sampler_args, data_source=datapipe, **sampler_kwargs)`` yields.

    Same as torch's ``SamplerIterDataPipe``: the input must have ``len()``; the default
    `SequentialSampler` yields ``0 .. len(datapipe) - 1``.
    """

    def __init__(
        self,
        datapipe: IterDataPipe[Any],
        sampler: type[IndexSampler[Any]] = SequentialSampler,
        sampler_args: tuple[Any, ...] | None = None,
        sampler_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(datapipe, Sized):
            raise AssertionError("Sampler class requires input datapipe implemented `__len__`")
        self.datapipe = datapipe
        self.sampler_args = () if sampler_args is None else sampler_args
        self.sampler_kwargs = {} if sampler_kwargs is None else sampler_kwargs
        self.sampler = sampler(*self.sampler_args, data_source=datapipe, **self.sampler_kwargs)  # type: ignore[call-arg]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.sampler)

    def __len__(self) -> int:
        if isinstance(self.sampler, Sized):
            return len(self.sampler)
        raise TypeError(f"{type(self).__name__} instance doesn't have valid length")
