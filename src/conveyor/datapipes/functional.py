"""The functional form of the built-in operations, as ordinary typed methods.

torch generates these methods at import time and ships a generated ``.pyi`` so that type
checkers see them. Here each one is written out: `IterFunctional` and `MapFunctional` are
mixed into `IterDataPipe` and `MapDataPipe`, and every method imports its node class when
called, so this module (and the base classes) import no operation module, and the
operation modules may import the base classes freely. ``dp.map(f)`` is exactly
``Mapper(dp, f)``; see each class for the contract.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from conveyor.datapipes.base import DataChunk, IterDataPipe, MapDataPipe

__all__ = ["IterFunctional", "MapFunctional"]

T_co = TypeVar("T_co", covariant=True)
U = TypeVar("U")
R = TypeVar("R")
P = ParamSpec("P")
Classifier = Callable[[Any], "int | None"]


class IterFunctional(Generic[T_co]):
    """Functional form of the iterable-style operations (mixed into `IterDataPipe`)."""

    def _me(self) -> IterDataPipe[T_co]:
        return cast("IterDataPipe[T_co]", self)

    def pipe(self, op: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``op(self, *args, **kwargs)``: the typed way to chain an operation of your own."""
        return op(self, *args, **kwargs)

    # ----- callable / selecting -------------------------------------------------------
    def map(
        self, fn: Callable[..., Any], input_col: Any = None, output_col: Any = None
    ) -> IterDataPipe[Any]:
        """Apply ``fn`` to every item (or to columns of it); see `iter.Mapper`."""
        from conveyor.datapipes.iter.callable import Mapper

        return Mapper(self._me(), fn, input_col, output_col)

    def flatmap(
        self, fn: Callable[..., Any] | None = None, input_col: Any = None
    ) -> IterDataPipe[Any]:
        """Apply ``fn`` and yield every element of its result; see `iter.FlatMapper`."""
        from conveyor.datapipes.iter.callable import FlatMapper

        return FlatMapper(self._me(), fn, input_col)

    def collate(
        self,
        conversion: Callable[[Any], Any] | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
    ) -> IterDataPipe[Any]:
        """Collate every batch (default: `conveyor.collate.default_collate`)."""
        from conveyor.datapipes.iter.callable import Collator

        return Collator(self._me(), conversion, collate_fn)

    def filter(self, filter_fn: Callable[..., bool], input_col: Any = None) -> IterDataPipe[T_co]:
        """Keep the items for which ``filter_fn`` is True; see `iter.Filter`."""
        from conveyor.datapipes.iter.selecting import Filter

        return Filter(self._me(), filter_fn, input_col)

    def header(self, limit: int | None = 10) -> IterDataPipe[T_co]:
        """Only the first ``limit`` items; see `iter.Header`."""
        from conveyor.datapipes.iter.selecting import Header

        return Header(self._me(), limit)

    # ----- grouping -------------------------------------------------------------------
    def batch(
        self,
        batch_size: int,
        drop_last: bool = False,
        wrapper_class: type[DataChunk[Any]] | None = None,
    ) -> IterDataPipe[DataChunk[T_co]]:
        """Lists of ``batch_size`` items; see `iter.Batcher`."""
        from conveyor.datapipes.iter.grouping import Batcher

        return Batcher(self._me(), batch_size, drop_last, wrapper_class)

    def unbatch(self, unbatch_level: int = 1) -> IterDataPipe[Any]:
        """Flatten ``unbatch_level`` levels of lists; see `iter.UnBatcher`."""
        from conveyor.datapipes.iter.grouping import UnBatcher

        return UnBatcher(self._me(), unbatch_level)

    def groupby(
        self,
        group_key_fn: Callable[[Any], Hashable],
        *,
        keep_key: bool = False,
        buffer_size: int = 10000,
        group_size: int | None = None,
        guaranteed_group_size: int | None = None,
        drop_remaining: bool = False,
    ) -> IterDataPipe[Any]:
        """Batches of items sharing a key; see `iter.Grouper`."""
        from conveyor.datapipes.iter.grouping import Grouper

        return Grouper(
            self._me(),
            group_key_fn,
            keep_key=keep_key,
            buffer_size=buffer_size,
            group_size=group_size,
            guaranteed_group_size=guaranteed_group_size,
            drop_remaining=drop_remaining,
        )

    def bucketbatch(
        self,
        batch_size: int,
        drop_last: bool = False,
        batch_num: int = 100,
        sort_key: Callable[[Any], Any] | None = None,
    ) -> IterDataPipe[DataChunk[T_co]]:
        """Batches of similar items, via sorted buckets; see `iter.BucketBatcher`."""
        from conveyor.datapipes.iter.bucketing import BucketBatcher

        return BucketBatcher(self._me(), batch_size, drop_last, batch_num, sort_key)

    def padded_batch(
        self, batch_size: int, drop_last: bool = False, padding_value: float = 0
    ) -> IterDataPipe[Any]:
        """Batches of tensors padded to a common shape and stacked; see `iter.PaddedBatcher`."""
        from conveyor.datapipes.iter.bucketing import PaddedBatcher

        return PaddedBatcher(self._me(), batch_size, drop_last, padding_value)

    # ----- combining ------------------------------------------------------------------
    def concat(self, *datapipes: IterDataPipe[Any]) -> IterDataPipe[Any]:
        """This pipe's items, then each other pipe's; see `iter.Concater`."""
        from conveyor.datapipes.iter.combining import Concater

        return Concater(self._me(), *datapipes)

    def zip(self, *datapipes: IterDataPipe[Any]) -> IterDataPipe[tuple[Any, ...]]:
        """Tuples of one item from each pipe; see `iter.Zipper`."""
        from conveyor.datapipes.iter.combining import Zipper

        return Zipper(self._me(), *datapipes)

    def mux(self, *datapipes: IterDataPipe[Any]) -> IterDataPipe[Any]:
        """One item from each pipe in turn; see `iter.Multiplexer`."""
        from conveyor.datapipes.iter.combining import Multiplexer

        return Multiplexer(self._me(), *datapipes)

    def greedy_join(self, *datapipes: IterDataPipe[Any]) -> IterDataPipe[Any]:
        """Items from whichever pipe has one ready first; see `iter.GreedyJoiner`."""
        from conveyor.datapipes.iter.combining import GreedyJoiner

        return GreedyJoiner(self._me(), *datapipes)

    def fork(
        self,
        num_instances: int,
        buffer_size: int = 1000,
        copy: Literal["shallow", "deep"] | None = None,
    ) -> list[IterDataPipe[T_co]]:
        """``num_instances`` copies of this pipe's stream; see `iter.Forker`."""
        from conveyor.datapipes.iter.branching import Forker

        return Forker(self._me(), num_instances, buffer_size, copy).outputs

    def demux(
        self,
        num_instances: int,
        classifier_fn: Classifier,
        drop_none: bool = False,
        buffer_size: int = 1000,
    ) -> list[IterDataPipe[T_co]]:
        """Split the stream by ``classifier_fn``; see `iter.Demultiplexer`."""
        from conveyor.datapipes.iter.branching import Demultiplexer

        return Demultiplexer(
            self._me(), num_instances, classifier_fn, drop_none, buffer_size
        ).outputs

    # ----- order, sharding, repetition ------------------------------------------------
    def shuffle(self, *, buffer_size: int = 10000, unbatch_level: int = 0) -> IterDataPipe[T_co]:
        """Buffered, seedable shuffle; see `iter.Shuffler`."""
        from conveyor.datapipes.iter.combinatorics import Shuffler

        return Shuffler(self._me(), buffer_size=buffer_size, unbatch_level=unbatch_level)

    def sharding_filter(self, sharding_group_filter: int | None = None) -> IterDataPipe[T_co]:
        """Every n-th item once sharded by ``apply_sharding``; see `iter.ShardingFilter`."""
        from conveyor.datapipes.iter.sharding import ShardingFilter

        return ShardingFilter(self._me(), sharding_group_filter)

    def cycle(self, count: int | None = None) -> IterDataPipe[T_co]:
        """The whole stream ``count`` times (forever if None); see `iter.Cycler`."""
        from conveyor.datapipes.iter.repeating import Cycler

        return Cycler(self._me(), count)

    def repeat(self, times: int) -> IterDataPipe[T_co]:
        """Every item ``times`` times in a row; see `iter.Repeater`."""
        from conveyor.datapipes.iter.repeating import Repeater

        return Repeater(self._me(), times)

    def in_memory_cache(self, size: int | None = None) -> IterDataPipe[T_co]:
        """Replay later epochs from memory; see `iter.InMemoryCacheHolder`."""
        from conveyor.datapipes.iter.repeating import InMemoryCacheHolder

        return InMemoryCacheHolder(self._me(), size)

    # ----- concurrency ----------------------------------------------------------------
    def prefetch(self, buffer_size: int = 10, snapshot_every: int = 1) -> IterDataPipe[T_co]:
        """Run the pipe up to here in a background thread; see `iter.Prefetcher`."""
        from conveyor.datapipes.iter.offloading import Prefetcher

        return Prefetcher(self._me(), buffer_size, snapshot_every)

    def run_in_process(
        self, buffer_size: int = 10, multiprocessing_context: Any = None, snapshot_every: int = 1
    ) -> IterDataPipe[T_co]:
        """Run the pipe up to here in a child process; see `iter.ProcessRunner`."""
        from conveyor.datapipes.iter.offloading import ProcessRunner

        return ProcessRunner(self._me(), buffer_size, multiprocessing_context, snapshot_every)

    # ----- conversion -----------------------------------------------------------------
    def to_map(
        self, key_value_fn: Callable[[Any], tuple[Any, Any]] | None = None
    ) -> MapDataPipe[Any]:
        """A map-style pipe over ``(key, value)`` pairs; see `iter.IterToMapConverter`."""
        from conveyor.datapipes.iter.converting import IterToMapConverter

        return IterToMapConverter(self._me(), key_value_fn)


class MapFunctional(Generic[T_co]):
    """Functional form of the map-style operations (mixed into `MapDataPipe`)."""

    def _me(self) -> MapDataPipe[T_co]:
        return cast("MapDataPipe[T_co]", self)

    def pipe(self, op: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``op(self, *args, **kwargs)``: the typed way to chain an operation of your own."""
        return op(self, *args, **kwargs)

    def map(self, fn: Callable[[Any], U]) -> MapDataPipe[U]:
        """``fn(self[i])`` at every index; see `map.Mapper`."""
        from conveyor.datapipes.map.callable import Mapper

        return Mapper(self._me(), fn)

    def batch(
        self,
        batch_size: int,
        drop_last: bool = False,
        wrapper_class: type[DataChunk[Any]] | None = None,
    ) -> MapDataPipe[DataChunk[T_co]]:
        """Index ``i`` is the ``i``-th batch; see `map.Batcher`."""
        from conveyor.datapipes.map.grouping import Batcher

        return Batcher(self._me(), batch_size, drop_last, wrapper_class)

    def concat(self, *datapipes: MapDataPipe[Any]) -> MapDataPipe[Any]:
        """Indices run through this pipe, then each other; see `map.Concater`."""
        from conveyor.datapipes.map.combining import Concater

        return Concater(self._me(), *datapipes)

    def zip(self, *datapipes: MapDataPipe[Any]) -> MapDataPipe[tuple[Any, ...]]:
        """Index ``i`` is the tuple of every pipe's item ``i``; see `map.Zipper`."""
        from conveyor.datapipes.map.combining import Zipper

        return Zipper(self._me(), *datapipes)

    def shuffle(self, *, indices: list[Any] | None = None) -> IterDataPipe[T_co]:
        """An iterable-style pipe over a seeded permutation; see `map.Shuffler`."""
        from conveyor.datapipes.map.combinatorics import Shuffler

        return Shuffler(self._me(), indices=indices)

    def to_iter(self, indices: list[Any] | None = None) -> IterDataPipe[T_co]:
        """An iterable-style pipe over ``self[i]`` in index order; see `map.MapToIterConverter`."""
        from conveyor.datapipes.map.converting import MapToIterConverter

        return MapToIterConverter(self._me(), indices)
