"""A loader's options: one immutable record per concern, each checked as it is built.

The facade builds one `LoaderOptions` in ``DataLoader.__init__``; every later change of a
torch attribute (``loader.num_workers = 2``) replaces the concern it belongs to, which
checks itself again. The engine derives what it needs from it (`LoaderOptions.fetch_spec`,
the worker set-up) instead of copying fields. Messages are torch's wherever torch has one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from conveyor.engine.loop.autotune import AutotuneOptions, autotune_options
from conveyor.engine.workers.fetch import FetchSpec
from conveyor.engine.workers.frozen import Frozen
from conveyor.engine.workers.worker_kind import WorkerOptions

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


class DataOptions(Frozen):
    """What an epoch reads, in which order, and how one request becomes a batch."""

    __slots__ = (
        "batch_sampler",
        "batch_size",
        "collate_fn",
        "dataset",
        "drop_last",
        "generator",
        "is_graph",
        "iterable_style",
        "sampler",
    )
    dataset: Any
    sampler: Iterable[Any]
    batch_sampler: Iterable[list[Any]] | None
    batch_size: int | None
    drop_last: bool
    collate_fn: Callable[[Any], Any]
    generator: torch.Generator | None
    iterable_style: bool
    is_graph: bool  # a DataPipe graph: sharded and seeded per worker

    def __init__(
        self,
        dataset: Any,
        sampler: Iterable[Any],
        batch_sampler: Iterable[list[Any]] | None,
        batch_size: int | None,
        drop_last: bool,
        collate_fn: Callable[[Any], Any],
        generator: torch.Generator | None,
        iterable_style: bool,
        is_graph: bool = False,
    ) -> None:
        if batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive "
                "with drop_last"
            )
        self._set(locals())

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


class PinOptions(Frozen):
    """``pin_memory`` and its device (``""``: the current accelerator)."""

    __slots__ = ("device", "enabled")
    enabled: bool
    device: str

    def __init__(self, enabled: bool = False, device: str = "") -> None:
        self._set(locals())


class ErrorOptions(Frozen):
    """What a sample whose ``__getitem__`` raises does: stop loading, or be skipped."""

    __slots__ = ("max_skipped", "on_error")
    on_error: str
    max_skipped: int | None  # per epoch; past it loading stops with an error

    def __init__(self, on_error: str = "raise", max_skipped: int | None = None) -> None:
        if on_error not in ON_ERROR_POLICIES:
            raise ValueError(f"on_error should be one of {ON_ERROR_POLICIES}, but got {on_error!r}")
        if max_skipped is not None and (not isinstance(max_skipped, int) or max_skipped < 0):
            raise ValueError(f"max_skipped should be None or an int >= 0, but got {max_skipped!r}")
        self._set(locals())

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


_NO_PIN = PinOptions()
_RAISE = ErrorOptions()


class LoaderOptions(Frozen):
    """Everything a DataLoader was configured with, checked; the engine's only input."""

    __slots__ = (
        "autotune",
        "data",
        "errors",
        "fullsync",
        "pin",
        "profile_stages",
        "sample_seed",
        "snapshot_every_n_steps",
        "workers",
    )
    data: DataOptions
    workers: WorkerOptions
    pin: PinOptions
    errors: ErrorOptions
    fullsync: bool  # under torch.distributed, every rank stops with the first
    profile_stages: bool  # time every stage of a DataPipe graph
    snapshot_every_n_steps: int | None  # how often workers send their state (torchdata's)
    sample_seed: int | None  # per-sample generators (engine/workers/sample_seeding.py); None: off
    autotune: AutotuneOptions | None  # engine/loop/autotune.py; None: off

    def __init__(
        self,
        data: DataOptions,
        workers: WorkerOptions,
        pin: PinOptions = _NO_PIN,
        errors: ErrorOptions = _RAISE,
        fullsync: bool = False,
        profile_stages: bool = False,
        snapshot_every_n_steps: int | None = None,
        sample_seed: int | None = None,
        autotune: bool | AutotuneOptions | None = None,
    ) -> None:
        check_snapshot_steps(snapshot_every_n_steps)
        autotune = autotune_options(autotune)
        if autotune is not None and workers.num_workers == 0:
            raise ValueError(
                "autotune=True chooses how many of num_workers workers take tasks (num_workers "
                "is its ceiling): give num_workers > 0"
            )
        if sample_seed is not None and (type(sample_seed) is not int or sample_seed < 0):
            raise ValueError(f"sample_seed should be None or an int >= 0, got {sample_seed!r}")
        if errors.skip_bad_samples and data.iterable_style:
            raise ValueError(
                "on_error='skip' applies to map-style datasets: a stream cannot go on after "
                "its iterator raised. Give the stream its own policy (e.g. "
                "conveyor.TarShards(..., on_error='skip'))."
            )
        if profile_stages and not data.is_graph:
            raise ValueError(
                "profile_stages=True times the stages of a DataPipe graph; this dataset is "
                f"a {type(data.dataset).__name__}. Time __getitem__ with stats() instead."
            )
        self._set(locals())

    def changed(self, concern: str, **changes: Any) -> LoaderOptions:
        """A copy with ``changes`` made to one concern (``"data"``, ``"workers"``, ...) or,
        with ``concern=""``, to this object's own fields; every check runs again."""
        if not concern:
            return self.replace(**changes)
        part = getattr(self, concern).replace(**changes)
        return self.replace(**{concern: part})

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
            sample_seed=self.sample_seed,
        )
