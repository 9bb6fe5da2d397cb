"""One consumer's packed rows of one source, and where it is in them.

The consumer reads its share of the source's pending units (`conveyor.state.elastic`:
entries ``c, c + n, ...``) in order; each unit is read, tokenized and packed from the
point a checkpoint gives. Its position is ``index`` (entries of its share finished) and
``offset``: 0 before a unit is begun, else the encoded `ResumePoint` where the unit's next
row starts, so a unit in progress (mid-document, mid-row) continues with the same rows
in whichever consumer is dealt it next.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from conveyor.formats.errors import BadSampleWarning, ErrorPolicy
from conveyor.formats.skips import SkipRecord, skip_sink
from conveyor.state.elastic import Pending
from conveyor.text.documents import DocumentSource, TextBatch, TokenBatch, Unit
from conveyor.text.layout import Packing, ResumePoint
from conveyor.text.packing import pack
from conveyor.text.tokenize import Tokenizer

__all__ = ["SourceRows", "decode_offset", "encode_offset"]

_SHIFT = 32


def encode_offset(point: ResumePoint) -> int:
    """A resume point as one positive integer (0 means "not begun")."""
    if point.within >> _SHIFT:
        raise ValueError(f"resume point {point} out of range")
    return ((point.document << _SHIFT) | point.within) + 1


def decode_offset(offset: int) -> ResumePoint:
    if offset <= 0:
        return ResumePoint(0, 0)
    value = offset - 1
    return ResumePoint(value >> _SHIFT, value & ((1 << _SHIFT) - 1))


class SourceRows:
    """The rows one consumer reads from one source; ``index``/``offset`` say where it is
    after the last row it gave, ``tokens`` how many real tokens it gave."""

    def __init__(
        self,
        name: str,
        source: DocumentSource,
        unit_at: Callable[[int], Unit],
        pending: Pending,
        slot: tuple[int, int],
        reading: tuple[Packing, Tokenizer | None, ErrorPolicy],
        *,
        index: int = 0,
        offset: int = 0,
    ) -> None:
        self.name = name
        self._source, self._unit_at, self._pending = source, unit_at, pending
        self._consumers, self._consumer = slot
        self._packing, self._tokenizer, self._errors = reading
        self.index, self.offset = index, offset
        self.tokens = 0

    def rows(self) -> Iterator[dict[str, Any]]:
        share = self._pending.share(self._consumer, self._consumers, self.index)
        for position, pending_offset in share:
            unit = self._unit_at(position)
            point = decode_offset(self.offset or pending_offset)
            batches = self._tokenized(unit, self._source.read(unit, point.document, self._errors))
            for row, tokens, after in pack(self._packing, batches, point, self._dropper(unit)):
                self.offset = encode_offset(after)
                self.tokens += tokens
                yield row
            self.index += 1
            self.offset = 0

    def _tokenized(
        self, unit: Unit, batches: Iterable[TextBatch | TokenBatch]
    ) -> Iterator[TokenBatch]:
        for batch in batches:
            if isinstance(batch, TokenBatch):
                yield batch
            elif self._tokenizer is None:
                raise TypeError(
                    f"source {self.name!r} ({unit.url}) gives text: PackedText needs a "
                    "tokenizer= (conveyor.text.Tokenizer) to turn it into token ids"
                )
            else:
                yield from self._tokenize(batch)

    def _tokenize(self, batch: TextBatch) -> Iterator[TokenBatch]:
        size = self._tokenizer.batch_size if self._tokenizer is not None else 1
        assert self._tokenizer is not None
        for begin in range(0, len(batch.texts), size):
            part = TextBatch(batch.numbers[begin : begin + size], batch.texts[begin : begin + size])
            yield self._tokenizer(part)

    def _dropper(self, unit: Unit) -> Callable[[int, int], None]:
        limit = self._packing.seq_len

        def dropped(number: int, length: int) -> None:
            reason = f"document of {length} tokens, longer than seq_len={limit} (long_docs='drop')"
            record = SkipRecord(unit.url, reason, 1, (f"document {number}",))
            if not skip_sink().add(record):  # read outside a loader: nobody else reports it
                warnings.warn(f"dropped {record.describe()}", BadSampleWarning, stacklevel=2)

        return dropped
