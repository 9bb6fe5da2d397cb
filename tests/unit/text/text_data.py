"""Small corpora for the text tests: documents of random token ids, written as files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from conveyor.text import TokenFileWriter


def documents(count: int, seed: int = 0, longest: int = 60, vocab: int = 1000) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, int(rng.integers(1, longest))) for _ in range(count)]


def token_file(path: Path, docs: list[np.ndarray], dtype: type = np.uint16) -> str:
    prefix = str(path)
    with TokenFileWriter(prefix, dtype) as writer:
        for doc in docs:
            writer.add(doc)
    return prefix
