"""Sources: turn a sequence or mapping into a `MapDataPipe`."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from conveyor.datapipes.base import DataPipe, IterDataPipe, MapDataPipe

__all__ = ["SequenceWrapper"]

T = TypeVar("T")


class SequenceWrapper(MapDataPipe[T]):
    """Wraps a sequence or mapping. Same as ``torch.utils.data.datapipes.map.SequenceWrapper``.

    With ``deepcopy`` (default) the data is deep-copied once, at construction, as in torch.
    """

    def __init__(self, sequence: Sequence[T] | Mapping[Any, T], deepcopy: bool = True) -> None:
        self.sequence = sequence
        if deepcopy:
            try:
                self.sequence = copy.deepcopy(sequence)
            except TypeError:
                warnings.warn(
                    "The input sequence can not be deepcopied, "
                    "please be aware of in-place modification would affect source data",
                    stacklevel=2,
                )

    def __getitem__(self, index: Any) -> T:
        return self.sequence[index]

    def __len__(self) -> int:
        return len(self.sequence)

    def datapipe_inputs(self) -> list[DataPipe]:
        wrapped = self.sequence
        return [wrapped] if isinstance(wrapped, IterDataPipe | MapDataPipe) else []
