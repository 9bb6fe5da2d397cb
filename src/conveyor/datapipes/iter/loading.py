"""Loading nodes: files, tar shards, sample grouping and decoding (local and remote).

Importing this module registers their functional names on `IterDataPipe`:
``list_files``, ``open_files``, ``read_from_stream``, ``load_from_tar``, ``webdataset``,
``routed_decode`` and ``decode``.
"""

from conveyor.datapipes.iter.decoding import RoutedDecoder, extension_extract_fn
from conveyor.datapipes.iter.files import FileLister, FileOpener, StreamReader
from conveyor.datapipes.iter.shards import ShardLister, TarShards
from conveyor.datapipes.iter.tar import TarArchiveLoader, TarMemberPath, WebDataset

__all__ = [
    "FileLister",
    "FileOpener",
    "RoutedDecoder",
    "ShardLister",
    "StreamReader",
    "TarArchiveLoader",
    "TarMemberPath",
    "TarShards",
    "WebDataset",
    "extension_extract_fn",
]
