"""Iterable-style DataPipes (``conveyor.datapipes.iter``, torch's ``datapipes.iter``)."""

from conveyor.datapipes.base import IterDataPipe
from conveyor.datapipes.iter.branching import Branch, Demultiplexer, Forker
from conveyor.datapipes.iter.bucketing import BucketBatcher, PaddedBatcher, pad_batch
from conveyor.datapipes.iter.callable import Collator, FlatMapper, Mapper
from conveyor.datapipes.iter.combinatorics import Shuffler
from conveyor.datapipes.iter.combining import Concater, GreedyJoiner, Multiplexer, Zipper
from conveyor.datapipes.iter.converting import IterToMapConverter
from conveyor.datapipes.iter.grouping import Batcher, Grouper, UnBatcher
from conveyor.datapipes.iter.loading import (
    FileLister,
    FileOpener,
    RoutedDecoder,
    ShardLister,
    StreamReader,
    TarArchiveLoader,
    TarMemberPath,
    TarShards,
    WebDataset,
    extension_extract_fn,
)
from conveyor.datapipes.iter.offloading import Prefetcher, ProcessRunner
from conveyor.datapipes.iter.repeating import Cycler, InMemoryCacheHolder, Repeater
from conveyor.datapipes.iter.sampling import Sampler
from conveyor.datapipes.iter.selecting import Filter, Header
from conveyor.datapipes.iter.sharding import SHARDING_PRIORITIES, ShardingFilter
from conveyor.datapipes.iter.wrappers import IterableWrapper

__all__ = [
    "Batcher",
    "Branch",
    "BucketBatcher",
    "Collator",
    "Concater",
    "Cycler",
    "Demultiplexer",
    "extension_extract_fn",
    "FileLister",
    "FileOpener",
    "Filter",
    "FlatMapper",
    "Forker",
    "GreedyJoiner",
    "Grouper",
    "Header",
    "InMemoryCacheHolder",
    "IterableWrapper",
    "IterDataPipe",
    "IterToMapConverter",
    "Mapper",
    "Multiplexer",
    "pad_batch",
    "PaddedBatcher",
    "Prefetcher",
    "ProcessRunner",
    "Repeater",
    "RoutedDecoder",
    "Sampler",
    "SHARDING_PRIORITIES",
    "ShardingFilter",
    "ShardLister",
    "Shuffler",
    "StreamReader",
    "TarArchiveLoader",
    "TarMemberPath",
    "TarShards",
    "UnBatcher",
    "WebDataset",
    "Zipper",
]
