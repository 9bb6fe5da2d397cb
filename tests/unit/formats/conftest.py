"""Shared shard fixtures for the format and loading-node tests."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conveyor.formats import ShardWriter


def jpeg_bytes(seed: int, side: int = 16) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def write_shards(root: Path, samples: int = 20, per_shard: int = 5) -> list[str]:
    """``samples`` samples of ``{jpg, cls, txt}`` in shards of ``per_shard``; their paths."""
    with ShardWriter(str(root / "shard-%04d.tar"), max_count=per_shard) as writer:
        for i in range(samples):
            writer.write({"__key__": f"{i:06d}", "jpg": jpeg_bytes(i), "cls": i, "txt": f"#{i}"})
    return writer.shards


@pytest.fixture
def shards(tmp_path: Path) -> list[str]:
    return write_shards(tmp_path)


@pytest.fixture
def make_shards(tmp_path: Path) -> Callable[..., list[str]]:
    def make(samples: int = 20, per_shard: int = 5, name: str = "s") -> list[str]:
        root = tmp_path / name
        root.mkdir()
        return write_shards(root, samples, per_shard)

    return make
