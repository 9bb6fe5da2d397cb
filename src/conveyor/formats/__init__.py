"""Formats: tar shards (reading, writing), WebDataset sample grouping, decoders by extension.

Skips under ``on_error="skip"`` are `SkipRecord`s (samples lost, keys, shard) kept in a
per-process `SkipSink` for the loader to drain (`drain_skips`).

Plain functions and classes with no DataPipe in them; the pipeline nodes built on them
live in ``conveyor.datapipes.iter`` (``load_from_tar``, ``webdataset``, ``decode``,
``TarShards``).

Importing this package imports none of its modules: each name below is imported on first
use, so a loader that only needs `errors` or `skips` does not pull in tar reading and
storage (`import conveyor` time, S4).
"""

from typing import TYPE_CHECKING

from conveyor.lazy_names import lazy_exports

if TYPE_CHECKING:
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

_LAZY = {
    "BadSampleWarning": "conveyor.formats.errors",
    "Decoder": "conveyor.formats.decoders",
    "DecoderRegistry": "conveyor.formats.decoders",
    "ErrorPolicy": "conveyor.formats.errors",
    "IMAGE_EXTENSIONS": "conveyor.formats.decoders",
    "IMAGE_SPECS": "conveyor.formats.decoders",
    "SampleBuilder": "conveyor.formats.grouping",
    "SampleError": "conveyor.formats.errors",
    "ShardSummary": "conveyor.formats.reading",
    "ShardWriter": "conveyor.formats.writer",
    "SkipRecord": "conveyor.formats.skips",
    "SkipSink": "conveyor.formats.skips",
    "SkippedSample": "conveyor.formats.errors",
    "TarMember": "conveyor.formats.tar",
    "TarWriter": "conveyor.formats.writer",
    "TooManyBadSamples": "conveyor.formats.errors",
    "as_policy": "conveyor.formats.errors",
    "decode_image": "conveyor.formats.decoders",
    "drain_skips": "conveyor.formats.skips",
    "encode_value": "conveyor.formats.writer",
    "group_samples": "conveyor.formats.grouping",
    "iter_members": "conveyor.formats.reading",
    "iter_samples": "conveyor.formats.reading",
    "open_archive": "conveyor.formats.tar",
    "read_members": "conveyor.formats.tar",
    "register_decoder": "conveyor.formats.decoders",
    "skip_sink": "conveyor.formats.skips",
    "split_name": "conveyor.formats.grouping",
    "summarize_shard": "conveyor.formats.reading",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)
