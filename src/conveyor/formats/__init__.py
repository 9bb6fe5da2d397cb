"""Formats: tar shards (reading, writing), WebDataset sample grouping, decoders by extension.

Skips under ``on_error="skip"`` are `SkipRecord`s (samples lost, keys, shard) kept in a
per-process `SkipSink` for the loader to drain (`drain_skips`).

Plain functions and classes with no DataPipe in them; the pipeline nodes built on them
live in ``conveyor.datapipes.iter`` (``load_from_tar``, ``webdataset``, ``decode``,
``TarShards``).
"""

from conveyor.formats.decoders import (
    IMAGE_EXTENSIONS,
    IMAGE_SPECS,
    Decoder,
    DecoderRegistry,
    decode_image,
    register_decoder,
)
from conveyor.formats.errors import (
    BadSampleWarning,
    ErrorPolicy,
    SampleError,
    SkippedSample,
    TooManyBadSamples,
    as_policy,
)
from conveyor.formats.grouping import SampleBuilder, group_samples, split_name
from conveyor.formats.reading import ShardSummary, iter_members, iter_samples, summarize_shard
from conveyor.formats.skips import SkipRecord, SkipSink, drain_skips, skip_sink
from conveyor.formats.tar import TarMember, open_archive, read_members
from conveyor.formats.writer import ShardWriter, TarWriter, encode_value

__all__ = [
    "IMAGE_EXTENSIONS",
    "IMAGE_SPECS",
    "BadSampleWarning",
    "Decoder",
    "DecoderRegistry",
    "ErrorPolicy",
    "SampleBuilder",
    "SampleError",
    "ShardSummary",
    "ShardWriter",
    "SkipRecord",
    "SkipSink",
    "SkippedSample",
    "TarMember",
    "TarWriter",
    "TooManyBadSamples",
    "as_policy",
    "decode_image",
    "drain_skips",
    "encode_value",
    "group_samples",
    "iter_members",
    "iter_samples",
    "open_archive",
    "read_members",
    "register_decoder",
    "skip_sink",
    "split_name",
    "summarize_shard",
]
