"""PositionTable: a buffer's items as (unit, offset) positions, and its small plain state."""

from __future__ import annotations

import io
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.datapipes.positions import PositionTable
from conveyor.state.plain import check_plain

OPS = st.lists(
    st.tuples(
        st.sampled_from(["append", "replace", "swap_pop"]),
        st.integers(0, 9),  # unit
        st.one_of(st.integers(0, 2**20).map(lambda b: b * 512), st.integers(0, 2**47)),
        st.integers(0, 10**6),  # slot chooser
    ),
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_the_table_mirrors_the_buffer_and_its_state_round_trips(ops: list) -> None:
    table, buffer = PositionTable(16), []
    for op, unit, offset, chooser in ops:
        position = (f"s3://bucket/shard-{unit}.tar", offset)
        if op == "append" or not buffer:
            table.append(position)
            buffer.append(position)
        elif op == "replace":
            slot = chooser % len(buffer)
            table.replace(slot, position)
            buffer[slot] = position
        else:
            slot = chooser % len(buffer)
            buffer[slot], buffer[-1] = buffer[-1], buffer[slot]
            buffer.pop()
            table.swap_pop(slot)
        assert table.positions() == buffer
    state = table.state()
    check_plain(state)
    assert json.loads(json.dumps(state)) == state
    assert PositionTable.from_state(state, 16).positions() == buffer


def test_ten_thousand_tar_positions_fit_in_64_kb() -> None:
    table = PositionTable(10_000)
    for i in range(10_000):  # 40 shards of 250 samples of ~50 kB each
        table.append((f"s3://bucket/train/shard-{i // 250:06d}.tar", (i % 250) * 100 * 512))
    buffer = io.BytesIO()
    torch.save(table.state(), buffer)
    assert len(buffer.getvalue()) <= 64 * 1024


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"slots": "not base64!"}, "not base64"),
        ({"slots": 12}, "a base64 string expected"),
        ({"width": 16}, "no such layout"),
        ({"units": ["a"]}, "outside the 1 units"),
        ({"units": "abc"}, "a list of unit names"),
        ({"slots": "AAAA"}, "no whole number of words"),  # 3 bytes
    ],
)
def test_a_damaged_state_is_a_value_error_naming_the_field(change: dict, message: str) -> None:
    table = PositionTable(4)
    for i in range(3):
        table.append((f"u{i}", i * 512))
    state = {**table.state(), **change}
    with pytest.raises(ValueError, match=message):
        PositionTable.from_state(state, 4)
