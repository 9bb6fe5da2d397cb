"""A Hugging Face ``datasets.Dataset`` (Arrow) as a source of documents.

Units are ranges of ``unit_rows`` rows, read by index through the dataset's Arrow table:
a dataset loaded from files is memory-mapped, and pickles to a worker as the paths of its
Arrow files (every worker maps the same pages; nothing is copied per worker). A dataset
built in memory (``Dataset.from_dict``) pickles whole: save it with ``save_to_disk`` and
``load_from_disk`` it first for large data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from conveyor.formats.errors import ErrorPolicy, SampleError
from conveyor.text.documents import TextBatch, TokenBatch, Unit

__all__ = ["HFDocuments"]


class HFDocuments:
    """Documents from ``column`` of a ``datasets.Dataset`` (strings, or lists of token
    ids), ``unit_rows`` rows per unit of work, read ``batch_size`` rows at a time."""

    def __init__(
        self, dataset: Any, *, column: str = "text", unit_rows: int = 8192, batch_size: int = 1024
    ) -> None:
        if column not in dataset.column_names:
            raise ValueError(
                f"HFDocuments: the dataset has no column {column!r} (it has {dataset.column_names})"
            )
        if unit_rows < 1 or batch_size < 1:
            raise ValueError("unit_rows and batch_size must be >= 1")
        self.dataset = dataset
        self.column = column
        self.unit_rows = unit_rows
        self.batch_size = batch_size
        self._name = f"hf:{getattr(dataset, '_fingerprint', '') or id(dataset)}"

    def units(self) -> list[Unit]:
        rows = len(self.dataset)
        return [
            Unit(self._name, first, min(rows, first + self.unit_rows))
            for first in range(0, rows, self.unit_rows)
        ]

    def identity(self) -> str:
        text = f"hf\x00{self._name}\x00{len(self.dataset)}\x00{self.column}\x00{self.unit_rows}"
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def read(self, unit: Unit, start: int, errors: ErrorPolicy) -> Iterator[TextBatch | TokenBatch]:
        table = self.dataset.with_format("arrow")
        stop = len(self.dataset) if unit.stop is None else unit.stop
        for begin in range(unit.first + start, stop, self.batch_size):
            end = min(stop, begin + self.batch_size)
            column = table[begin:end][self.column].combine_chunks()
            numbers = range(begin - unit.first, end - unit.first)
            yield from self._batch(column, list(numbers), errors)

    def _batch(
        self, column: Any, numbers: list[int], errors: ErrorPolicy
    ) -> Iterator[TextBatch | TokenBatch]:
        values = column.to_pylist()
        kept: list[int] = []
        docs: list[Any] = []
        for number, value in zip(numbers, values, strict=True):
            if value is None or len(value) == 0:
                errors.handle(SampleError("empty document", self._name, f"row {number}"))
                continue
            kept.append(number)
            docs.append(value)
        if not docs:
            return
        if isinstance(docs[0], str):
            yield TextBatch(kept, docs)
            return
        lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
        offsets = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.concatenate([np.asarray(doc, dtype=np.int64) for doc in docs])
        yield TokenBatch(np.asarray(kept, dtype=np.int64), tokens, offsets)
