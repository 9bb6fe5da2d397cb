"""Plug-ins for the shared benchmark suite's S3 pipeline interface (``plugin:MODULE:FUNC``).

``s3_files(spec)``: a map-style DataPipe over the JPEG files; ``s3_tar(spec)``: the same
images streamed from tar shards (`TarShards`). Both return a ``conveyor.DataLoader`` of
``(uint8 [B, 3, 224, 224], int64 [B])`` batches covering exactly ``spec.n`` samples with
``spec.num_workers`` process workers. ``spec`` fields: ``files``, ``labels``, ``shards``,
``n``, ``batch_size``, ``num_workers``, ``seed``, ``transform``, ``load_decode``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from conveyor.dataloader import DataLoader
from conveyor.datapipes.iter.shards import TarShards
from conveyor.datapipes.map import SequenceWrapper

__all__ = ["s3_files", "s3_tar"]


class TarSampleTransform:
    """Picklable ``sample -> (transform(sample["jpg"]), int(sample["cls"]))``."""

    def __init__(self, transform: Callable[[bytes], np.ndarray[Any, Any]]) -> None:
        self.transform = transform

    def __call__(self, sample: dict[str, Any]) -> tuple[np.ndarray[Any, Any], int]:
        return self.transform(sample["jpg"]), int(sample["cls"])


def s3_tar(spec: Any) -> DataLoader[Any]:
    """Tar shards -> samples -> decode + crop in the workers -> batches."""
    pipe = TarShards(list(spec.shards), decode=None).map(TarSampleTransform(spec.transform))
    return DataLoader(pipe, batch_size=spec.batch_size, num_workers=spec.num_workers)


def s3_files(spec: Any) -> DataLoader[Any]:
    """Map-style DataPipe over sample indices (files), shuffled by the loader's sampler."""
    pipe = SequenceWrapper(range(spec.n), deepcopy=False).map(spec.load_decode)
    generator = torch.Generator().manual_seed(int(spec.seed))
    return DataLoader(
        pipe,
        batch_size=spec.batch_size,
        shuffle=True,
        num_workers=spec.num_workers,
        generator=generator,
    )
