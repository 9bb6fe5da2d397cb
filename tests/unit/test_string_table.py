"""StringTable: the same values as the list it was built from, 4 bytes of overhead an item."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from conveyor import StringTable


def test_values_slices_negative_indices_and_pickling_match_the_list() -> None:
    items = ["", "a", "naïve", "日本", "x" * 1000]
    table = StringTable(items)
    assert list(table) == items and len(table) == len(items)
    assert table[-1] == items[-1] and table[1:4] == items[1:4]
    assert list(pickle.loads(pickle.dumps(table))) == items
    with pytest.raises(IndexError):
        table[len(items)]


def test_bytes_stay_bytes_and_mixed_items_are_refused() -> None:
    assert list(StringTable([b"a", b""])) == [b"a", b""]
    with pytest.raises(TypeError, match="all str or all bytes"):
        StringTable(["a", b"b"])


def test_offsets_take_four_bytes_an_item() -> None:
    table = StringTable(str(i) for i in range(10_000))
    assert table._offsets.dtype == np.uint32 and table._offsets.nbytes == 4 * 10_001
    assert table[9_999] == "9999"
