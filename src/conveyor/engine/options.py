"""A loader's options: one frozen dataclass per concern, each checked in ``__post_init__``.

The facade builds one `LoaderOptions` in ``DataLoader.__init__``; every later change of a
torch attribute (``loader.num_workers = 2``) replaces the concern it belongs to, which
checks itself again. The engine derives what it needs from it (`LoaderOptions.fetch_spec`,
the worker set-up) instead of copying fields. Messages are torch's wherever torch has one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from conveyor.engine.fetch import FetchSpec
from conveyor.engine.worker_kind import WorkerOptions

__all__ = [
    "ON_ERROR_POLICIES",
    "DataOptions",
    "ErrorOptions",
    "LoaderOptions",
    "PinOptions",
    "WorkerOptions",
    "check_snapshot_steps",
]

ON_ERROR_POLICIES = ("raise", "skip")


@dataclass(frozen=True)
class DataOptions:
    """What an epoch reads, in which order, and how one request becomes a batch."""

    dataset: Any
    sampler: Iterable[Any]
    batch_sampler: Iterable[list[Any]] | None
    batch_size: int | None
    drop_last: bool
    collate_fn: Callable[[Any], Any]
    generator: torch.Generator | None
    iterable_style: bool
    is_graph: bool = False  # a DataPipe graph: sharded and seeded per worker

    def __post_init__(self) -> None:
        if self.batch_size is None and self.drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive "
                "with drop_last"
            )

    @property
    def auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def index_sampler(self) -> Iterable[Any]:
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    @property
    def samples_per_request(self) -> int:
        """Samples one request asks for (a stream's batch size; 1 without batching)."""
        return getattr(self.index_sampler, "batch_size", None) or 1


@dataclass(frozen=True)
class PinOptions:
    """``pin_memory`` and its device (``""``: the current accelerator)."""

    enabled: bool = False
    device: str = ""


@dataclass(frozen=True)
class ErrorOptions:
    """What a sample whose ``__getitem__`` raises does: stop loading, or be skipped."""

    on_error: str = "raise"
    max_skipped: int | None = None  # per epoch; past it loading stops with an error

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR_POLICIES:
            raise ValueError(
                f"on_error should be one of {ON_ERROR_POLICIES}, but got {self.on_error!r}"
            )
        skipped = self.max_skipped
        if skipped is not None and (not isinstance(skipped, int) or skipped < 0):
            raise ValueError(f"max_skipped should be None or an int >= 0, but got {skipped!r}")

    @property
    def skip_bad_samples(self) -> bool:
        return self.on_error == "skip"


def check_snapshot_steps(steps: int | None) -> None:
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 0):
        raise ValueError(
            "snapshot_every_n_steps should be a non-negative integer or None (0: torchdata's "
            "'only when asked'), but got "
            f"snapshot_every_n_steps={steps!r}"
        )


@dataclass(frozen=True)
class LoaderOptions:
    """Everything a DataLoader was configured with, checked; the engine's only input."""

    data: DataOptions
    workers: WorkerOptions
    pin: PinOptions = PinOptions()
    errors: ErrorOptions = ErrorOptions()
    fullsync: bool = False  # under torch.distributed, every rank stops with the first
    profile_stages: bool = False  # time every stage of a DataPipe graph
    snapshot_every_n_steps: int | None = None  # torchdata's; every step is exact here

    def __post_init__(self) -> None:
        check_snapshot_steps(self.snapshot_every_n_steps)
        if self.errors.skip_bad_samples and self.data.iterable_style:
            raise ValueError(
                "on_error='skip' applies to map-style datasets: a stream cannot go on after "
                "its iterator raised. Give the stream its own policy (e.g. "
                "conveyor.TarShards(..., on_error='skip'))."
            )
        if self.profile_stages and not self.data.is_graph:
            raise ValueError(
                "profile_stages=True times the stages of a DataPipe graph; this dataset is "
                f"a {type(self.data.dataset).__name__}. Time __getitem__ with stats() instead."
            )

    def replace(self, concern: str, **changes: Any) -> LoaderOptions:
        """A copy with ``changes`` made to one concern (``"data"``, ``"workers"``, ...) or,
        with ``concern=""``, to this object's own fields; every check runs again."""
        if not concern:
            return dataclasses.replace(self, **changes)
        part = dataclasses.replace(getattr(self, concern), **changes)
        return dataclasses.replace(self, **{concern: part})

    def fetch_spec(self) -> FetchSpec:
        """How a request becomes a batch, as the main process and every worker need it."""
        data = self.data
        return FetchSpec(
            dataset=data.dataset,
            iterable_style=data.iterable_style,
            auto_collation=data.auto_collation,
            collate_fn=data.collate_fn,
            drop_last=data.drop_last,
            skip_bad_samples=self.errors.skip_bad_samples,
            samples_per_request=data.samples_per_request,
        )
