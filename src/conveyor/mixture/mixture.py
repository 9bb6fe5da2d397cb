"""`Mixture`: named sources interleaved by a deterministic low-discrepancy schedule."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal, cast

import numpy as np
from numpy.typing import NDArray

from conveyor.dataset import IterableDataset
from conveyor.distributed import world_and_rank
from conveyor.engine.workers.worker_info import get_worker_info
from conveyor.keyed_permutation import derive_key
from conveyor.mixture.placement import Placement
from conveyor.mixture.rates import Rates, Weight, to_rates
from conveyor.mixture.run import STOP_MODES, MixtureRun
from conveyor.mixture.schedule import Schedule
from conveyor.mixture.sources import MapSource, StreamSource, is_map_style, reader_for
from conveyor.mixture.state import (
    STATE_VERSION,
    MixtureState,
    history_from_state,
    history_to_state,
    sources_digest,
)
from conveyor.torch_compat import torch_worker_info

__all__ = ["Mixture"]

StopOn = Literal["first_exhausted", "all_exhausted", "never"]
_SOURCE_PURPOSE = 5


class Mixture(IterableDataset[Any]):
    """Samples of several named sources, mixed in proportion to ``weights``.

    Not random draws: a deterministic schedule (docs/design/mixture.md) gives source ``i``
    ``floor`` or ``ceil`` of ``w_i * n`` of the first ``n`` samples at every ``n``, so any
    window of ``L`` consecutive samples holds ``w_i * L`` of them within less than 2
    (within 1 when ``w_i * L`` is a whole number; e.g. +-0.1 % in every 1,000 samples for
    weights in thousandths). ``w_i`` are the weights normalised to sum to 1; see
    `conveyor.mixture.rates` for how inexact weights are rounded (to 1/65,536).

    ``sources`` maps names to map-style datasets (read in a fresh keyed permutation every
    pass when ``shuffle``, keyed by ``seed`` and the epoch), or to streams (IterableDatasets,
    DataPipes, any re-iterable), read in order. ``stop_on``: ``"first_exhausted"`` ends the mixture
    where a source first runs out; ``"all_exhausted"`` cycles sources that run out until
    every source still scheduled has run out once, then ends; ``"never"`` cycles forever.
    The sample where the mixture ends is not produced.

    `set_weights` changes the proportions from a position on; `counts` tells how many
    samples each source gave; `state_dict` (positions and the weight history, ~200 bytes
    for any number of sources before weight changes) resumes exactly. Each ``iter()``
    starts a new run at position 0 with the weights in force (call `set_epoch` first to
    reshuffle the map-style sources), except the first after `load_state_dict`, which
    continues the checkpoint.

    Args:
        sources: names mapped to map-style datasets or streams.
        weights: each source's share, by name or in the order of ``sources``.
        seed: keys the map-style sources' permutations.
        stop_on: ``"first_exhausted"``, ``"all_exhausted"`` or ``"never"`` (see above).
        shuffle: read map-style sources in a fresh permutation every pass.
    """

    def __init__(
        self,
        sources: Mapping[str, Any],
        weights: Mapping[str, Weight] | Sequence[Weight],
        *,
        seed: int = 0,
        stop_on: StopOn = "first_exhausted",
        shuffle: bool = True,
    ) -> None:
        if not isinstance(sources, Mapping) or not sources:
            raise TypeError("Mixture sources must be a non-empty mapping of name -> source")
        if stop_on not in STOP_MODES:
            raise ValueError(f"stop_on must be one of {STOP_MODES}, got {stop_on!r}")
        self._names = [str(name) for name in sources]
        self._sources = list(sources.values())
        for name, source in zip(self._names, self._sources, strict=True):
            if not is_map_style(source) and not isinstance(source, Iterable):
                raise TypeError(
                    f"Mixture source {name!r} must be a map-style dataset (__getitem__ and "
                    f"__len__) or an iterable, got {type(source).__name__}"
                )
        self._initial = to_rates(self._aligned(weights))
        self.seed = seed
        self.epoch = 0  # keys the map-style sources' permutations (set_epoch)
        self.stop_on = stop_on
        self.shuffle = shuffle
        self._schedule = Schedule(self._initial)
        self._placement = Placement()
        self._run: MixtureRun | None = None
        self._start = 0  # where the next run starts (a loaded checkpoint's position)
        self._loaded: Mapping[str, Any] | None = None
        # In a loader with workers (conveyor.engine.resume.placed): the first position no worker
        # has been asked for yet, set_weights' default; and a count of weight changes the
        # loader forwards to its workers.
        self._next_free: Callable[[], int | None] | None = None
        self.control_version = 0

    # conveyor's DataLoader splits the positions between its workers and ranks and
    # checkpoints the run by position (conveyor.engine.resume.placed)
    positions_split_by_loader: ClassVar[bool] = True

    def __copy__(self) -> Mixture:
        """A copy that reads its streams on its own (a thread worker's replica): stream
        sources are deep-copied (two readers of one pipe would invalidate each other),
        map-style sources are shared (read by index)."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._sources = [_own_stream(source) for source in self._sources]
        return twin

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def _aligned(self, weights: Mapping[str, Weight] | Sequence[Weight]) -> list[Weight]:
        if isinstance(weights, Mapping):
            unknown = sorted(set(map(str, weights)) - set(self._names))
            missing = [name for name in self._names if name not in weights]
            if unknown or missing:
                raise ValueError(
                    f"Mixture weights must name every source exactly: missing {missing}, "
                    f"unknown {unknown}"
                )
            return [weights[name] for name in self._names]
        if isinstance(weights, str) or len(weights) != len(self._names):
            raise ValueError(
                f"Mixture needs one weight per source ({len(self._names)}), got {weights!r}"
            )
        return list(weights)

    # The schedule ----------------------------------------------------------------------

    def source_at(self, position: int) -> str:
        """The name of the source that global ``position`` takes (O(1), no replay)."""
        return self._names[self._schedule.source_at(position)]

    def sources_at(self, start: int, stop: int) -> NDArray[np.int64]:
        """Source numbers (indices into `names`) of positions ``[start, stop)``, vectorised."""
        return self._schedule.locate(start, stop)[0]

    def set_weights(
        self, weights: Mapping[str, Weight] | Sequence[Weight], *, position: int | None = None
    ) -> None:
        """Follow ``weights`` from ``position`` on: by default the next sample this process
        produces (or the next run's start). Positions already produced cannot change."""
        rates = to_rates(self._aligned(weights))
        produced = self._run.position if self._run is not None else self._start
        asked = self._next_free() if self._run is None and self._next_free else None
        produced = produced if asked is None else asked  # a loader's workers produce
        position = produced if position is None else position
        if position < produced:
            raise ValueError(
                f"set_weights(position={position}): samples up to position {produced} were "
                "already produced with the old weights"
            )
        self._schedule.change(position, rates)
        self.control_version += 1
        if self._run is not None:
            self._run.schedule_changed()

    @property
    def rates(self) -> Rates:
        """The integer shares in force (see `conveyor.mixture.rates`)."""
        return self._schedule.rates

    def counts(self, position: int | None = None) -> dict[str, int]:
        """Samples each source gave before ``position`` (default: the position this process
        reached), derived from the schedule; a loader passes what it delivered."""
        if position is None:
            position = self._run.position if self._run is not None else self._start
        realised = self._schedule.counts_before(position).tolist()
        return dict(zip(self._names, realised, strict=True))

    # Iteration -------------------------------------------------------------------------

    def configure(
        self, *, worker_id: int, num_workers: int, rank: int, world_size: int, batch_size: int
    ) -> None:
        """Produce only the positions of one worker of one rank (see `Placement`); called
        by the loader in each worker before ``iter()``."""
        self._placement = Placement(worker_id, num_workers, rank, world_size, batch_size)
        # a thread worker's copy is shallow: its weight history must be its own
        self._schedule = history_from_state(self.control(), self._initial)

    # A loader's side (conveyor.engine.resume.placed) -------------------------------------------

    def begin_loader_epoch(
        self, next_free: Callable[[], int | None] | None, resumed: Mapping[str, Any] | None
    ) -> None:
        """In the main process of a loader with workers, as an epoch starts: ``next_free()``
        is the first position not yet requested (`set_weights`' default); ``resumed``, the
        checkpoint the epoch continues, else a new run starts at 0 with today's weights."""
        self._next_free = next_free
        if resumed is not None:
            self.load_state_dict(resumed)
            self._loaded = None  # the workers continue it; this object only keeps time
        else:
            self._schedule = Schedule(self._schedule.rates)
            self._start = 0
            self._loaded = None
        self._run = None

    def control(self) -> dict[str, Any]:
        """The weight history, as `apply_control` takes it (what a loader sends workers)."""
        vectors, changes = history_to_state(self._schedule, self._initial)
        return {"vectors": vectors, "changes": changes}

    def apply_control(self, history: Mapping[str, Any]) -> None:
        """In a worker: follow the main process's weight history from now on."""
        self._schedule = history_from_state(history, self._initial)
        if self._run is not None:
            self._run.follow(self._schedule)

    def next_run_state(self) -> dict[str, Any]:
        """The checkpoint of the next run (position 0) with the weights in force now: what
        a loader keeps between epochs, so a resumed job does not fall back to the weights
        the mixture was built with."""
        current = Schedule(self._initial)
        current.change(0, self._schedule.rates)
        vectors, changes = history_to_state(current, self._initial)
        state = self.state_at(0)
        state.update(vectors=vectors, changes=changes)
        return state

    def state_at(self, position: int) -> dict[str, Any]:
        """The checkpoint of the whole loader's run at global ``position`` (its workers each
        hold a part): any topology resumes it; stream sources are read up to their counts."""
        vectors, changes = history_to_state(self._schedule, self._initial)
        state = MixtureState(
            version=STATE_VERSION,
            sources=sources_digest(self._names, self._lengths()),
            weights=self._initial.digest,
            seed=self.seed,
            epoch=self.epoch,
            stop_on=self.stop_on,
            position=position,
            vectors=vectors,
            changes=changes,
            ends={},
            streams={},
        )
        return cast(dict[str, Any], state)

    def __iter__(self) -> Iterator[Any]:
        self._check_placement()
        if self._loaded is None and self._run is not None:  # a new run with today's weights
            self._schedule = Schedule(self._schedule.rates)
            self._start = 0
        readers = [
            reader_for(name, source, key=self._source_key(number))
            for number, (name, source) in enumerate(zip(self._names, self._sources, strict=True))
        ]
        if self._loaded is not None:
            self._restore_streams(readers, self._loaded)
        self._run = MixtureRun(
            self._schedule,
            readers,
            stop_on=self.stop_on,
            placement=self._placement,
            start=self._start,
        )
        self._loaded = None
        return self._run.samples()

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle the map-style sources for the next run, as `DistributedSampler.set_epoch`
        does: call it before each epoch (the same ``epoch`` gives the same samples)."""
        self.epoch = epoch

    def _source_key(self, number: int) -> int | None:
        if not self.shuffle:
            return None
        return derive_key(self.seed, self.epoch, number, _SOURCE_PURPOSE)

    def _check_placement(self) -> None:
        if self._placement.replicas > 1:
            return
        info: Any = get_worker_info() or torch_worker_info()  # or a worker of torch's loader
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                "Mixture in a loader with num_workers > 1 needs its positions split between "
                "workers (Mixture.configure), which this loader does not do: every worker "
                "would produce the same samples. Use conveyor.DataLoader, or num_workers=1."
            )
        if world_and_rank()[0] > 1:
            raise RuntimeError(
                "Mixture under torch.distributed with several ranks: call "
                "mixture.configure(worker_id=0, num_workers=1, rank=..., world_size=..., "
                "batch_size=...) so each rank produces its own batches, not the same ones"
            )

    # Checkpoints -----------------------------------------------------------------------

    def _lengths(self) -> list[int | None]:
        return [len(source) if is_map_style(source) else None for source in self._sources]

    def state_dict(self) -> dict[str, Any]:
        """Position and weight history: counts and stream ends are derived on load."""
        if self._run is None and self._loaded is not None:
            return dict(self._loaded)
        vectors, changes = history_to_state(self._schedule, self._initial)
        ends: dict[str, int] = {}
        streams: dict[str, Any] = {}
        readers = self._run.readers if self._run is not None else []
        for number, reader in enumerate(readers):
            if isinstance(reader, StreamSource) and reader.stateful and reader.started:
                streams[reader.name] = reader.state()
                if reader.first_pass_length is not None:
                    ends[str(number)] = reader.first_pass_length
        state = MixtureState(
            version=STATE_VERSION,
            sources=sources_digest(self._names, self._lengths()),
            weights=self._initial.digest,
            seed=self.seed,
            epoch=self.epoch,
            stop_on=self.stop_on,
            position=self._run.position if self._run is not None else self._start,
            vectors=vectors,
            changes=changes,
            ends=ends,
            streams=streams,
        )
        return cast(dict[str, Any], state)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Make the next ``iter()`` continue the checkpointed run exactly.

        The sources (names, kinds, map-style lengths), the construction weights and
        ``stop_on`` must match, else `ValueError` naming the field; ``seed`` and ``epoch``
        are adopted.
        """
        if state_dict.get("version") != STATE_VERSION:
            raise ValueError(
                f"Mixture state has version {state_dict.get('version')!r}; this conveyor "
                f"reads version {STATE_VERSION}"
            )
        expected = {
            "sources": sources_digest(self._names, self._lengths()),
            "weights": self._initial.digest,
            "stop_on": self.stop_on,
        }
        for field, value in expected.items():
            if state_dict[field] != value:
                raise ValueError(
                    f"Mixture checkpoint has another {field!r} ({state_dict[field]!r}, here "
                    f"{value!r}): it cannot be resumed exactly with this Mixture"
                )
        self._schedule = history_from_state(state_dict, self._initial)
        self.seed = int(state_dict["seed"])
        self.epoch = int(state_dict["epoch"])
        self._start = int(state_dict["position"])
        self._run = None
        self._loaded = dict(state_dict)

    def _restore_streams(
        self, readers: Sequence[MapSource | StreamSource], state: Mapping[str, Any]
    ) -> None:
        counts = self._schedule.counts_before(self._start).tolist()
        for number, reader in enumerate(readers):
            if isinstance(reader, StreamSource):
                saved = state["streams"].get(reader.name)
                end = state["ends"].get(str(number))
                reader.restore(counts[number], saved, end)


def _own_stream(source: Any) -> Any:
    if is_map_style(source):
        return source
    try:
        return copy.deepcopy(source)
    except Exception:  # not copyable (an open file, a socket): shared, as before
        return source
