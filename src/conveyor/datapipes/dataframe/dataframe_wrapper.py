"""torch's module path ``datapipes.dataframe.dataframe_wrapper``: DataFrame helpers (pandas).

pandas is imported when a helper is called, so conveyor itself does not need it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["concat", "create_dataframe", "get_item", "get_len", "is_column", "is_dataframe"]


def _pandas() -> Any:
    try:
        return importlib.import_module("pandas")
    except ImportError as error:
        raise ImportError("DataFrame pipes need pandas: pip install pandas") from error


def create_dataframe(data: Any, columns: Sequence[str] | None = None) -> Any:
    return _pandas().DataFrame(data, columns=columns)


def is_dataframe(data: Any) -> bool:
    try:
        return isinstance(data, _pandas().DataFrame)
    except ImportError:
        return False


def is_column(data: Any) -> bool:
    try:
        return isinstance(data, _pandas().core.series.Series)
    except ImportError:
        return False


def concat(buffer: Sequence[Any]) -> Any:
    return _pandas().concat(buffer)


def iterate(frame: Any) -> Iterator[Any]:
    yield from frame.itertuples(index=False)


def get_item(frame: Any, index: int) -> Any:
    return frame[index : index + 1]


def get_len(frame: Any) -> int:
    return len(frame.index)
