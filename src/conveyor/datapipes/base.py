"""The public DataPipe classes: `IterDataPipe` and `MapDataPipe` with every operation typed.

torch generates the functional form at import time and ships a generated ``.pyi`` so that
type checkers see it. Here each operation is an ordinary typed method (``dp.map(f)`` is
exactly ``Mapper(dp, f)``), which builds its node through the operation registry
(`conveyor.datapipes.functional`): node modules register themselves when
``conveyor.datapipes`` is imported, so this module imports none of them and they import
it freely. The machinery (cursors, state, inputs) is `conveyor.datapipes.node`. Users add
their own operations with ``IterDataPipe.register_datapipe_as_function(name, cls)`` or
`functional_datapipe`, as in torch; for a typed call use ``dp.pipe(MyOp, *args)``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import IO, Any, Concatenate, Literal, ParamSpec, TypeVar, cast

from conveyor.datapipes.cursor import (
    Cursor,
    SourceCursor,
    StateDict,
    check_version,
    sub_state,
)
from conveyor.datapipes.functional import build
from conveyor.datapipes.node import DataChunk, IterNode, MapNode
from conveyor.engine.offload.channel import NotAvailable

__all__ = [
    "Cursor",
    "DataChunk",
    "DataPipe",
    "IterDataPipe",
    "MapDataPipe",
    "NotAvailable",
    "SourceCursor",
    "StateDict",
    "as_iter_pipe",
    "check_version",
    "functional_datapipe",
    "sub_state",
]

T_co = TypeVar("T_co", covariant=True)
U = TypeVar("U")
R = TypeVar("R")
P = ParamSpec("P")
Classifier = Callable[[Any], "int | None"]


class IterDataPipe(IterNode[T_co]):
    """Iterable-style DataPipe; same role as ``torch.utils.data.IterDataPipe``.

    Differences from torch: state is explicit (``state_dict``), pulls may be non-blocking
    (``nonblocking_next``), subclasses may implement ``_make_cursor`` instead of
    ``__iter__`` (see `conveyor.datapipes.node`), and every built-in operation is a typed
    method. Not thread-safe: one consumer drives a pipe at a time.
    """

    def pipe(self, op: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``op(self, *args, **kwargs)``: the typed way to chain an operation of your own."""
        return op(self, *args, **kwargs)

    # ----- callable / selecting -------------------------------------------------------
    def map(
        self, fn: Callable[..., Any], input_col: Any = None, output_col: Any = None
    ) -> IterDataPipe[Any]:
        """Apply ``fn`` to every item (or to columns of it); see `iter.Mapper`."""
        return _iter("iter.map", self, fn, input_col, output_col)

    def flatmap(
        self, fn: Callable[..., Any] | None = None, input_col: Any = None
    ) -> IterDataPipe[Any]:
        """Apply ``fn`` and yield every element of its result; see `iter.FlatMapper`."""
        return _iter("iter.flatmap", self, fn, input_col)

    def collate(
        self,
        conversion: Callable[[Any], Any] | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
    ) -> IterDataPipe[Any]:
        """Collate every batch (default: `conveyor.collate.default_collate`)."""
        return _iter("iter.collate", self, conversion, collate_fn)

    def filter(self, filter_fn: Callable[..., bool], input_col: Any = None) -> IterDataPipe[T_co]:
        """Keep the items for which ``filter_fn`` is True; see `iter.Filter`."""
        return _iter("iter.filter", self, filter_fn, input_col)

    def header(self, limit: int | None = 10) -> IterDataPipe[T_co]:
        """Only the first ``limit`` items; see `iter.Header`."""
        return _iter("iter.header", self, limit)

    # ----- grouping -------------------------------------------------------------------
    def batch(
        self,
        batch_size: int,
        drop_last: bool = False,
        wrapper_class: type[DataChunk[Any]] | None = None,
    ) -> IterDataPipe[DataChunk[T_co]]:
        """Lists of ``batch_size`` items; see `iter.Batcher`."""
        return _iter("iter.batch", self, batch_size, drop_last, wrapper_class)

    def unbatch(self, unbatch_level: int = 1) -> IterDataPipe[Any]:
        """Flatten ``unbatch_level`` levels of lists; see `iter.UnBatcher`."""
        return _iter("iter.unbatch", self, unbatch_level)

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
        return _iter(
            "iter.groupby",
            self,
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
        return _iter("iter.bucketbatch", self, batch_size, drop_last, batch_num, sort_key)

    def padded_batch(
        self, batch_size: int, drop_last: bool = False, padding_value: float = 0
    ) -> IterDataPipe[Any]:
        """Batches of tensors padded to a common shape and stacked; see `iter.PaddedBatcher`."""
        return _iter("iter.padded_batch", self, batch_size, drop_last, padding_value)

    # ----- combining ------------------------------------------------------------------
    def concat(self, *datapipes: IterDataPipe[Any]) -> IterDataPipe[Any]:
        """This pipe's items, then each other pipe's; see `iter.Concater`."""
        return _iter("iter.concat", self, *datapipes)

    def zip(self, *datapipes: IterDataPipe[Any]) -> IterDataPipe[tuple[Any, ...]]:
        """Tuples of one item from each pipe; see `iter.Zipper`."""
        return _iter("iter.zip", self, *datapipes)

    def mux(self, *datapipes: IterDataPipe[Any]) -> IterDataPipe[Any]:
        """One item from each pipe in turn; see `iter.Multiplexer`."""
        return _iter("iter.mux", self, *datapipes)

    def greedy_join(self, *datapipes: IterDataPipe[Any]) -> IterDataPipe[Any]:
        """Items from whichever pipe has one ready first; see `iter.GreedyJoiner`."""
        return _iter("iter.greedy_join", self, *datapipes)

    def fork(
        self,
        num_instances: int,
        buffer_size: int = 1000,
        copy: Literal["shallow", "deep"] | None = None,
    ) -> list[IterDataPipe[T_co]]:
        """``num_instances`` copies of this pipe's stream; see `iter.Forker`."""
        return _branches("iter.fork", self, num_instances, buffer_size, copy)

    def demux(
        self,
        num_instances: int,
        classifier_fn: Classifier,
        drop_none: bool = False,
        buffer_size: int = 1000,
    ) -> list[IterDataPipe[T_co]]:
        """Split the stream by ``classifier_fn``; see `iter.Demultiplexer`."""
        return _branches("iter.demux", self, num_instances, classifier_fn, drop_none, buffer_size)

    # ----- order, sharding, repetition ------------------------------------------------
    def shuffle(self, *, buffer_size: int = 10000, unbatch_level: int = 0) -> IterDataPipe[T_co]:
        """Buffered, seedable shuffle; see `iter.Shuffler`."""
        return _iter("iter.shuffle", self, buffer_size=buffer_size, unbatch_level=unbatch_level)

    def sharding_filter(self, sharding_group_filter: int | None = None) -> IterDataPipe[T_co]:
        """Every n-th item once sharded by ``apply_sharding``; see `iter.ShardingFilter`."""
        return _iter("iter.sharding_filter", self, sharding_group_filter)

    def cycle(self, count: int | None = None) -> IterDataPipe[T_co]:
        """The whole stream ``count`` times (forever if None); see `iter.Cycler`."""
        return _iter("iter.cycle", self, count)

    def repeat(self, times: int) -> IterDataPipe[T_co]:
        """Every item ``times`` times in a row; see `iter.Repeater`."""
        return _iter("iter.repeat", self, times)

    def in_memory_cache(self, size: int | None = None) -> IterDataPipe[T_co]:
        """Replay later epochs from memory; see `iter.InMemoryCacheHolder`."""
        return _iter("iter.in_memory_cache", self, size)

    # ----- concurrency ----------------------------------------------------------------
    def prefetch(self, buffer_size: int = 10, snapshot_every: int = 1) -> IterDataPipe[T_co]:
        """Run the pipe up to here in a background thread; see `iter.Prefetcher`."""
        return _iter("iter.prefetch", self, buffer_size, snapshot_every)

    def run_in_process(
        self, buffer_size: int = 10, multiprocessing_context: Any = None, snapshot_every: int = 1
    ) -> IterDataPipe[T_co]:
        """Run the pipe up to here in a child process; see `iter.ProcessRunner`."""
        return _iter(
            "iter.run_in_process", self, buffer_size, multiprocessing_context, snapshot_every
        )

    # ----- conversion -----------------------------------------------------------------
    def to_map(
        self, key_value_fn: Callable[[Any], tuple[Any, Any]] | None = None
    ) -> MapDataPipe[Any]:
        """A map-style pipe over ``(key, value)`` pairs; see `iter.IterToMapConverter`."""
        return _map("iter.to_map", self, key_value_fn)

    # ----- files and tar shards -------------------------------------------------------
    def list_files(self, masks: str | list[str] = "", **options: Any) -> IterDataPipe[str]:
        """The files under each root this pipe yields; see `iter.FileLister`."""
        return _iter("iter.list_files", self, masks, **options)

    def open_files(
        self, mode: str = "r", encoding: str | None = None, length: int = -1, **options: Any
    ) -> IterDataPipe[tuple[str, IO[Any]]]:
        """``(path, stream)`` for every path; see `iter.FileOpener`."""
        return _iter("iter.open_files", self, mode, encoding, length, **options)

    def read_from_stream(self, chunk: int | None = None) -> IterDataPipe[tuple[str, bytes]]:
        """``(path, bytes)`` from ``(path, stream)`` pairs; see `iter.StreamReader`."""
        return _iter("iter.read_from_stream", self, chunk)

    def load_from_tar(
        self, mode: str = "r:*", length: int = -1, **options: Any
    ) -> IterDataPipe[tuple[str, Any]]:
        """``(path, member)`` for every file of every archive; see `iter.TarArchiveLoader`."""
        return _iter("iter.load_from_tar", self, mode, length, **options)

    def webdataset(self, **options: Any) -> IterDataPipe[dict[str, Any]]:
        """Tar members grouped into samples by key; see `iter.WebDataset`."""
        return _iter("iter.webdataset", self, **options)

    def routed_decode(self, *handlers: Callable[..., Any], **options: Any) -> IterDataPipe[Any]:
        """Data decoded by extension; see `iter.RoutedDecoder`."""
        return _iter("iter.routed_decode", self, *handlers, **options)

    def decode(self, *handlers: Callable[..., Any], **options: Any) -> IterDataPipe[Any]:
        """Same as `routed_decode` (WebDataset's name)."""
        return _iter("iter.decode", self, *handlers, **options)


class MapDataPipe(MapNode[T_co]):
    """Map-style DataPipe; same role as ``torch.utils.data.MapDataPipe``.

    Random-access and stateless (its state dict is ``{"version": 1}``);
    ``nonblocking_get(index)`` is the RFC's non-blocking read. Every built-in operation is
    a typed method.
    """

    def pipe(self, op: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``op(self, *args, **kwargs)``: the typed way to chain an operation of your own."""
        return op(self, *args, **kwargs)

    def map(self, fn: Callable[[Any], U]) -> MapDataPipe[U]:
        """``fn(self[i])`` at every index; see `map.Mapper`."""
        return _map("map.map", self, fn)

    def batch(
        self,
        batch_size: int,
        drop_last: bool = False,
        wrapper_class: type[DataChunk[Any]] | None = None,
    ) -> MapDataPipe[DataChunk[T_co]]:
        """Index ``i`` is the ``i``-th batch; see `map.Batcher`."""
        return _map("map.batch", self, batch_size, drop_last, wrapper_class)

    def concat(self, *datapipes: MapDataPipe[Any]) -> MapDataPipe[Any]:
        """Indices run through this pipe, then each other; see `map.Concater`."""
        return _map("map.concat", self, *datapipes)

    def zip(self, *datapipes: MapDataPipe[Any]) -> MapDataPipe[tuple[Any, ...]]:
        """Index ``i`` is the tuple of every pipe's item ``i``; see `map.Zipper`."""
        return _map("map.zip", self, *datapipes)

    def shuffle(self, *, indices: list[Any] | None = None) -> IterDataPipe[T_co]:
        """An iterable-style pipe over a seeded permutation; see `map.Shuffler`."""
        return _iter("map.shuffle", self, indices=indices)

    def to_iter(self, indices: list[Any] | None = None) -> IterDataPipe[T_co]:
        """An iterable-style pipe over ``self[i]`` in index order; see `map.MapToIterConverter`."""
        return _iter("map.to_iter", self, indices)


DataPipe = IterDataPipe[Any] | MapDataPipe[Any]
C = TypeVar("C", bound=type)


def functional_datapipe(name: str) -> Callable[[C], C]:
    """Class decorator registering a DataPipe under a functional name (torch's decorator).

    ``@functional_datapipe("my_op")`` on an `IterDataPipe` (or `MapDataPipe`) subclass
    makes ``dp.my_op(*args)`` build ``MyOp(dp, *args)``.

    Args:
        name: the method name the DataPipe gets (``dp.name(...)``).
    """

    def register(cls: C) -> C:
        if issubclass(cls, IterDataPipe):
            IterDataPipe.register_datapipe_as_function(name, cls)
        elif issubclass(cls, MapDataPipe):
            MapDataPipe.register_datapipe_as_function(name, cls)
        else:
            raise TypeError(f"`functional_datapipe` can only decorate DataPipes, not {cls!r}")
        return cls

    return register


def _iter(name: str, *args: Any, **kwargs: Any) -> IterDataPipe[Any]:
    return cast("IterDataPipe[Any]", build(name, *args, **kwargs))


def _map(name: str, *args: Any, **kwargs: Any) -> MapDataPipe[Any]:
    return cast("MapDataPipe[Any]", build(name, *args, **kwargs))


def _branches(name: str, *args: Any) -> list[IterDataPipe[Any]]:
    """A splitter's output pipes (``fork``, ``demux``)."""
    return cast("list[IterDataPipe[Any]]", build(name, *args).outputs)


def as_iter_pipe(value: object, who: str) -> IterDataPipe[Any]:
    """``value`` if it is an `IterDataPipe`, else a `TypeError` naming ``who``."""
    if not isinstance(value, IterDataPipe):
        raise TypeError(
            f"{who} expects IterDataPipe inputs, got {type(value).__name__}; "
            "wrap plain iterables with conveyor.datapipes.iter.IterableWrapper"
        )
    return value
