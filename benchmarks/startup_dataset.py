"""A map-style dataset with an optional fat payload, importable by spawned workers."""

from __future__ import annotations

import numpy as np


class FatRange:
    """``range(n)`` that also carries ``fat_mb`` MB of Python objects to pickle.

    The payload is a list of small bytes objects (what a file-list or caption table
    looks like), so pickling and unpickling it costs real work, as in user datasets.
    """

    def __init__(self, n: int, fat_mb: int):
        self.n = n
        rng = np.random.default_rng(0)
        self.payload = [rng.bytes(100) for _ in range(fat_mb * 10_000)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class Records:
    """``n`` (path, label) records in a plain Python list, as an ImageFolder file list.

    ``__getitem__`` returns the record as it is: the start-up measured is the loader's
    (handing the list to workers), not a decoder's.
    """

    def __init__(self, n: int):
        self.samples = [
            (f"/data/train/n{i % 1000:08d}/img_{i:09d}.JPEG", i % 1000) for i in range(n)
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[str, int]:
        path, label = self.samples[i]
        return path, label
