"""Autotune's read-ahead floor: blocks, within a byte share per reader."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conveyor.storage.read_window import read_ahead_floor, set_read_ahead_floor


@pytest.fixture(autouse=True)
def _no_floor_after() -> Iterator[None]:
    yield
    set_read_ahead_floor(0)


def test_the_floor_is_blocks_within_the_byte_share_of_a_reader() -> None:
    assert read_ahead_floor(1 << 20) == 0  # none set: the readers' own window
    set_read_ahead_floor(16)
    assert read_ahead_floor(8 << 20) == 16
    set_read_ahead_floor(16, max_bytes=32 << 20)
    assert read_ahead_floor(8 << 20) == 4  # 32 MiB of 8 MiB blocks
    assert read_ahead_floor(1 << 20) == 16
    assert read_ahead_floor(64 << 20) == 1  # never below one block


def test_a_negative_floor_is_refused() -> None:
    with pytest.raises(ValueError, match="read-ahead floor"):
        set_read_ahead_floor(-1)
