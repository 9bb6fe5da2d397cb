"""`PackedText`: documents of named sources, tokenized, packed and mixed in token weights.

Every consumer (a worker of a rank) reads its share of each source's units (see
`conveyor.state.elastic`), packs each unit on its own (so a row is the same whoever
packs it) and interleaves the sources' rows by the mixture schedule of
`conveyor.mixture.schedule`: rows hold ``seq_len`` tokens, so weights in rows are weights
in tokens (best-fit rows less their padding). A checkpoint is the progress through each
source's units plus the consumer's place in its schedule; the loader merges its workers'
(`conveyor.state.stream_set`) when the topology changes, and the new consumers split what
is left: units not begun are dealt out anew, units in progress continue at their row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from conveyor.dataset import IterableDataset
from conveyor.distributed import world_and_rank
from conveyor.engine.workers.worker_info import get_worker_info
from conveyor.formats.errors import ErrorPolicy, OnError, as_policy
from conveyor.global_order import EpochOrder
from conveyor.keyed_permutation import derive_key
from conveyor.mixture.rates import (
    Rates,
    Weight,
    decode_shares,
    encode_shares,
    rates_from_shares,
    to_rates,
)
from conveyor.state.elastic import ELASTIC_VERSION, Pending
from conveyor.state.stream_set import is_stream_set, stream_progress
from conveyor.text.documents import DocumentSource, Unit
from conveyor.text.mixing import RowMix
from conveyor.text.packing import Packing
from conveyor.text.reader import SourceRows
from conveyor.text.tokenize import Tokenizer

__all__ = ["PackedText"]

StopOn = Literal["all_exhausted", "first_exhausted"]


class PackedText(IterableDataset[dict[str, Any]]):
    """Rows of ``packing.seq_len`` tokens from text or token sources; exact resume anywhere.

    Args:
        sources: one `DocumentSource` (`ParquetDocuments`, `JsonlDocuments`, `TokenFiles`,
            `HFDocuments`) or a mapping of names to them.
        packing: a `Packing`, or ``seq_len`` for concatenate-and-split with the defaults.
        tokenizer: a `Tokenizer` (or a callable over a list of texts) for text sources; it
            runs where the rows are made (in the DataLoader's workers).
        weights: each source's share of the tokens (names -> weights, or one per source in
            order; normalised); default equal. `set_weights` changes them mid-run.
        shuffle: visit each source's units in a keyed permutation of ``(seed, epoch)``;
            documents within a unit keep their order.
        stop_on: ``"all_exhausted"``: a source that runs out leaves the mixture and the
            others go on; ``"first_exhausted"``: a consumer stops when any source runs out.
        on_error: bad data (unreadable file or row group, non-JSON line, missing column,
            empty document): ``"raise"`` names file and row; ``"skip"`` counts it in the
            DataLoader's skip ledger (or an `ErrorPolicy` with budgets).

    Each row is a dict of ``input_ids``, ``labels``, ``position_ids`` (int64 arrays) and,
    with ``packing.boundaries``, ``cu_seqlens`` (then batch with `collate_packed`). Give
    each source at least ``world_size x num_workers`` units, or some consumers have none.
    """

    def __init__(
        self,
        sources: DocumentSource | Mapping[str, DocumentSource],
        packing: Packing | int,
        *,
        tokenizer: Tokenizer | Callable[[list[str]], Any] | None = None,
        weights: Mapping[str, Weight] | Sequence[Weight] | None = None,
        shuffle: bool = False,
        seed: int = 0,
        stop_on: StopOn = "all_exhausted",
        on_error: OnError | ErrorPolicy = "raise",
    ) -> None:
        named = dict(sources) if isinstance(sources, Mapping) else {"text": sources}
        if not named:
            raise ValueError("PackedText needs at least one source")
        if stop_on not in ("all_exhausted", "first_exhausted"):
            raise ValueError(
                f"stop_on must be 'all_exhausted' or 'first_exhausted', got {stop_on!r}"
            )
        self.names = [str(name) for name in named]
        self.sources = list(named.values())
        self.packing = packing if isinstance(packing, Packing) else Packing(seq_len=packing)
        if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
            tokenizer = Tokenizer(tokenizer)
        self.tokenizer = tokenizer
        self.shuffle, self.seed, self.stop_on = shuffle, seed, stop_on
        self.on_error = on_error
        self.epoch = 0
        self._rates = to_rates(self._aligned(weights))
        self._changes = 0  # weight changes followed (compares workers' checkpoints)
        self.control_version = 0  # the loader forwards set_weights to its workers
        self._units = [list(source.units()) for source in self.sources]
        self._identity = self._digest()
        self._loaded: Mapping[str, Any] | None = None
        self._cursor: _Consumer | None = None

    def _aligned(self, weights: Mapping[str, Weight] | Sequence[Weight] | None) -> list[Weight]:
        if weights is None:
            return [1] * len(self.names)
        if isinstance(weights, Mapping):
            if set(map(str, weights)) != set(self.names):
                raise ValueError(
                    f"weights must name every source exactly: sources {self.names}, "
                    f"weights {sorted(map(str, weights))}"
                )
            return [weights[name] for name in self.names]
        if isinstance(weights, str) or len(weights) != len(self.names):
            raise ValueError(f"PackedText needs one weight per source ({len(self.names)})")
        return list(weights)

    def _digest(self) -> str:
        parts = [
            f"{n}\x01{s.identity()}\x01{len(u)}"
            for n, s, u in zip(self.names, self.sources, self._units, strict=True)
        ]
        parts += [repr(self.packing), str(self.shuffle), str(self.seed), self.stop_on]
        return hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).hexdigest()

    # Weights -----------------------------------------------------------------------

    @property
    def rates(self) -> Rates:
        """The integer token shares in force (`conveyor.mixture.rates`)."""
        return self._rates

    def set_weights(self, weights: Mapping[str, Weight] | Sequence[Weight]) -> None:
        """Follow ``weights`` from the next row each consumer makes: without workers, the
        next batch; with workers, each worker's first batch not yet asked for."""
        self._follow(to_rates(self._aligned(weights)))
        self.control_version += 1

    def _follow(self, rates: Rates) -> None:
        self._rates = rates
        self._changes += 1
        if self._cursor is not None:
            self._cursor.mix.follow(rates)

    def control(self) -> dict[str, Any]:
        """What a loader sends its workers after `set_weights`."""
        return {"weights": encode_shares(self._rates.shares)}

    def apply_control(self, payload: Mapping[str, Any]) -> None:
        """In a worker: follow the main process's weights from the next row on."""
        self._follow(rates_from_shares(decode_shares(payload["weights"])))

    def set_epoch(self, epoch: int) -> None:
        """Shuffle the units by ``epoch`` from the next iteration on (same on every rank)."""
        self.epoch = epoch

    # Iteration ---------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        consumers, consumer = _slot()
        loaded, self._loaded = self._loaded, None
        saved_slot = None if loaded is None else (loaded.get("consumers"), loaded.get("consumer"))
        if (
            saved_slot is not None
            and saved_slot[0] is not None
            and saved_slot != (consumers, consumer)
        ):
            raise ValueError(
                f"PackedText: this checkpoint is consumer {saved_slot[1]} of {saved_slot[0]}, "
                f"this iteration is consumer {consumer} of {consumers}; merge the consumers' "
                "checkpoints (the DataLoader does, and conveyor.merge_checkpoints for ranks) "
                "to resume on another topology"
            )
        self._cursor = _Consumer(self, loaded, (consumers, consumer))
        return self._cursor.rows()

    def unit_at(self, number: int) -> Callable[[int], Unit]:
        units = self._units[number]
        if not self.shuffle:
            return units.__getitem__
        order = EpochOrder(len(units), derive_key(self.seed, number), self.epoch, None)
        return lambda position: units[int(order(np.array([position], np.uint64))[0])]

    # Checkpoints -------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """This consumer's progress through every source (plain data, JSON-ready)."""
        if self._cursor is not None:
            return self._cursor.state()
        if self._loaded is not None:
            return dict(self._loaded)
        return self.fresh_state()

    def fresh_state(self) -> dict[str, Any]:
        streams = {
            name: [len(units), 0, [], []]
            for name, units in zip(self.names, self._units, strict=True)
        }
        return {
            "elastic": ELASTIC_VERSION,
            "identity": self._identity,
            "epoch": self.epoch,
            "streams": streams,
            "shared": self.shared(),
        }

    def shared(self) -> dict[str, Any]:
        return {"weights": encode_shares(self._rates.shares), "control": self._changes}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue ``state_dict`` from the next iteration on; adopts its epoch and weights.

        ValueError when it is no PackedText progress, or one of other sources or settings.
        """
        if not is_stream_set(state_dict):
            raise ValueError(
                "PackedText.load_state_dict expects the dict its state_dict() returned, got "
                f"keys {sorted(map(str, state_dict))}"
            )
        if state_dict.get("identity") != self._identity:
            raise ValueError(
                "PackedText checkpoint is of other sources or settings (identity "
                f"{state_dict.get('identity')!r}, this one {self._identity!r}): resume with "
                "the same files, names, packing, shuffle and seed"
            )
        self.epoch = int(state_dict.get("epoch", 0))
        shared = state_dict.get("shared", {})
        if "weights" in shared:
            self._rates = rates_from_shares(decode_shares(shared["weights"]))
            self._changes = int(shared.get("control", 0))
        self._loaded = dict(state_dict)
        self._cursor = None


class _Consumer:
    """One consumer's iteration: a reader per source and the mixing schedule."""

    def __init__(
        self, dataset: PackedText, loaded: Mapping[str, Any] | None, slot: tuple[int, int]
    ) -> None:
        self._dataset = dataset
        self._slot = slot
        base = loaded if loaded is not None else dataset.fresh_state()
        self._base = {
            name: [int(e[0]), int(e[1]), list(e[2]), [list(p) for p in e[3]]]
            for name, e in base["streams"].items()
        }
        errors = as_policy(dataset.on_error)
        reading = (dataset.packing, dataset.tokenizer, errors)
        self.readers: list[SourceRows] = []
        for number, name in enumerate(dataset.names):
            progress = stream_progress(base, name)
            pending = Pending(progress, int(progress["identity"]["units"]))
            self.readers.append(
                SourceRows(
                    name,
                    dataset.sources[number],
                    dataset.unit_at(number),
                    pending,
                    slot,
                    reading,
                    index=int(progress.get("index", 0)),
                    offset=int(progress.get("offset", 0)),
                )
            )
        mix = loaded.get("mix") if loaded is not None and "consumers" in loaded else None
        self.mix = RowMix(dataset.rates, mix)

    def rows(self) -> Iterator[dict[str, Any]]:
        first = self._dataset.stop_on == "first_exhausted"
        iterators = [reader.rows() for reader in self.readers]
        while (source := self.mix.next_source()) is not None:
            row = next(iterators[source], None)
            if row is None:
                if first:
                    return
                self.mix.exhausted(source)
                continue
            self.mix.advance()
            yield row

    def state(self) -> dict[str, Any]:
        consumers, consumer = self._slot
        streams = {
            reader.name: [*self._base[reader.name], reader.index, reader.offset]
            for reader in self.readers
        }
        return {
            "elastic": ELASTIC_VERSION,
            "identity": self._dataset._identity,
            "epoch": self._dataset.epoch,
            "streams": streams,
            "consumers": consumers,
            "consumer": consumer,
            "mix": self.mix.state(),
            "shared": self._dataset.shared(),
        }


def _slot() -> tuple[int, int]:
    """``(consumers, this consumer)``: ranks x workers of the loader iterating here."""
    world, rank = world_and_rank()
    info = get_worker_info()
    workers, worker = (1, 0) if info is None else (int(info.num_workers), int(info.id))
    return world * workers, rank * workers + worker
