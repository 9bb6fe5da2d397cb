"""What every text source gives the packer: units of work and batches of documents.

A source's data is cut into *units* (a Parquet or JSONL file, a range of documents of a
token file or of a Hugging Face dataset), listed once in one global order. Consumers (the
workers of every rank) are dealt whole units (`conveyor.state.elastic`), and a unit is
read from any of its documents on: documents are numbered from 0 within their unit, so a
checkpoint says "unit 7, document 1,204, token 310" and nothing else.

A source yields `TextBatch`es (strings still to tokenize) or `TokenBatch`es (token ids);
each document keeps its number, so documents skipped as bad data leave gaps, never shifts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from conveyor.formats.errors import ErrorPolicy

__all__ = ["DocumentSource", "TextBatch", "TokenBatch", "Unit"]


@dataclass(frozen=True)
class Unit:
    """One unit of a source: ``url``, and for ranges, documents ``[first, stop)`` of it
    (``stop`` None: to the end). ``tokens``: its size when known (token files)."""

    url: str
    first: int = 0
    stop: int | None = None
    tokens: int | None = None

    def describe(self) -> str:
        if self.first == 0 and self.stop is None:
            return self.url
        return f"{self.url}[{self.first}:{'' if self.stop is None else self.stop}]"


@dataclass(frozen=True)
class TextBatch:
    """Documents ``texts`` with their numbers within the unit (increasing)."""

    numbers: list[int]
    texts: list[str]


@dataclass(frozen=True)
class TokenBatch:
    """Documents as one array of tokens: document ``i`` is ``tokens[offsets[i]:offsets[i+1]]``
    and is number ``numbers[i]`` of its unit."""

    numbers: NDArray[np.int64]
    tokens: NDArray[np.integer]
    offsets: NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.numbers.size)


class DocumentSource(Protocol):
    """A source of documents in units (Parquet, JSONL, token files, HF datasets)."""

    def units(self) -> Sequence[Unit]:
        """Every unit, in one order that is the same in every process."""
        ...

    def read(self, unit: Unit, start: int, errors: ErrorPolicy) -> Iterator[TextBatch | TokenBatch]:
        """The unit's documents from number ``start`` on, in batches; bad data goes to
        ``errors`` (raise, or skip and count with the file and document)."""
        ...

    def identity(self) -> str:
        """What a checkpoint of this source depends on (its files and settings), as text."""
        ...
