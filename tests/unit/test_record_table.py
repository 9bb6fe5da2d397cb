"""RecordTable: every value and type read back equals the list or tuple it was built from."""

from __future__ import annotations

import collections
import contextlib
import gc
import math
import os
import pickle
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor.transport.fd_pickle import dumps_with_fds, loads_with_fds
from conveyor.transport.record_table import NotPlainError, RecordTable

scalars = st.one_of(
    st.text(),  # any code point, lone surrogates included
    st.binary(),
    st.integers(),  # big ones too: marshal keeps them exact
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
records = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5).map(tuple), max_leaves=8)
record_lists = st.lists(records, max_size=60)


def _same(read: Any, original: Any) -> bool:
    """Equal value and identical type, all the way down (NaN and -0.0 by their bits)."""
    if type(read) is not type(original):
        return False
    if type(original) is tuple:
        return len(read) == len(original) and all(map(_same, read, original))
    if type(original) is float:
        return struct.pack("<d", read) == struct.pack("<d", original)
    return bool(read == original)


def _memfd_entries() -> list[str]:
    entries = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            entries.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [e for e in entries if "conveyor-records" in e]


def _mapped() -> bool:
    with open("/proc/self/maps") as maps:
        return "conveyor-records" in maps.read()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=record_lists, as_tuple=st.booleans())
def test_every_value_and_type_reads_back_as_built(items: list[Any], as_tuple: bool) -> None:
    source: list[Any] | tuple[Any, ...] = tuple(items) if as_tuple else items
    table = RecordTable(source)
    try:
        assert len(table) == len(source)
        assert all(map(_same, table, source))  # iteration
        assert all(_same(table[i], source[i]) for i in range(-len(source), len(source)))
        for part in (slice(1, None, 2), slice(None, None, -1), slice(-3, None)):
            assert type(table[part]) is type(source)
            assert all(map(_same, table[part], source[part]))
        assert all(map(_same, reversed(table), reversed(source)))
        plain = pickle.loads(pickle.dumps(table))  # no descriptor channel: the plain source
        assert type(plain) is type(source) and all(map(_same, plain, source))
        blob, fds = dumps_with_fds([table, table])
        received = loads_with_fds(blob, [os.dup(fd) for fd in fds])
        assert len(fds) == 1 and received[0] is received[1]
        assert all(map(_same, received[0], source))
        received[0].close()
    finally:
        table.close()


def test_index_errors_and_types_are_the_sources() -> None:
    listed = RecordTable([("a", 1), ("b", 2)])
    kept = RecordTable((1, 2, 3))
    with pytest.raises(IndexError, match=r"^list index out of range$"):
        listed[2]
    with pytest.raises(IndexError, match=r"^tuple index out of range$"):
        kept[-4]
    with pytest.raises(TypeError, match="list indices must be integers or slices, not str"):
        listed["0"]
    assert listed[np.int64(1)] == ("b", 2) and listed[True] == ("b", 2)
    assert listed == [("a", 1), ("b", 2)] and listed != (("a", 1), ("b", 2))
    assert kept == (1, 2, 3) and hash(kept) == hash((1, 2, 3))
    assert ("b", 2) in listed and listed.index(("b", 2)) == 1 and kept.count(3) == 1
    assert listed + [("c", 3)] == [("a", 1), ("b", 2), ("c", 3)]  # noqa: RUF005
    with pytest.raises(TypeError, match="unhashable"):
        hash(listed)
    listed.close()
    kept.close()


@pytest.mark.parametrize(
    ("item", "named"),
    [
        ([1], "a list"),
        ({"a": 1}, "a dict"),
        (("x", [1]), "a tuple holding list"),
        (np.int64(3), "a int64"),
        (("x", np.float32(1)), "a tuple holding float32"),
        (collections.namedtuple("Pair", "a b")(1, 2), "a Pair"),
        (type("Name", (str,), {})("x"), "a Name"),
        (1j, "a complex"),
    ],
)
def test_what_is_not_a_plain_record_is_refused_by_position(item: Any, named: str) -> None:
    before = _memfd_entries()
    with pytest.raises(NotPlainError, match=f"item 2 is not a plain record \\({named}\\)"):
        RecordTable(["a", "b", item, "d"])
    assert _memfd_entries() == before  # nothing left behind


def test_changing_a_lists_table_makes_a_private_list_and_a_tuples_refuses() -> None:
    records = [("a", 1), ("b", 2), ("c", 3)]
    table = RecordTable(records)
    fd = table.shared_fd()
    mirror = list(records)
    for change in (
        lambda x: x.__setitem__(0, ("z", 0)),
        lambda x: x.append(("d", 4)),
        lambda x: x.sort(key=lambda r: r[1], reverse=True),
        lambda x: x.__delitem__(slice(0, 1)),
        lambda x: x.extend([("e", 5)]),
        lambda x: x.insert(1, ("f", 6)),
        lambda x: x.remove(("b", 2)),
        lambda x: x.reverse(),
        lambda x: x.pop(),
    ):
        change(table)
        change(mirror)
        assert list(table) == mirror and len(table) == len(mirror)
        assert table[0] == mirror[0] and table[-1:] == mirror[-1:]
    table += [("g", 7)]
    mirror += [("g", 7)]
    assert isinstance(table, RecordTable) and list(table) == mirror
    assert table.shared_fd() is None  # a private list never travels as the shared file
    assert pickle.loads(pickle.dumps(table)) == mirror
    assert records == [("a", 1), ("b", 2), ("c", 3)]  # the source is untouched
    table.close()
    assert not os.path.exists(f"/proc/self/fd/{fd}")

    kept = RecordTable((1, 2))
    with pytest.raises(TypeError, match="'tuple' object does not support item assignment"):
        kept[0] = 5
    with pytest.raises(TypeError, match="'tuple' object doesn't support item deletion"):
        del kept[0]
    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'append'"):
        kept.append(3)
    kept += (3,)
    assert kept == (1, 2, 3) and type(kept) is tuple


def test_close_releases_the_descriptor_and_the_mapping() -> None:
    before = _memfd_entries()
    table = RecordTable([("p", i) for i in range(1000)])
    assert len(_memfd_entries()) > len(before) and _mapped()
    table.close()
    assert _memfd_entries() == before and not _mapped()


def test_a_table_dropped_without_close_frees_its_descriptor() -> None:
    before = _memfd_entries()
    table = RecordTable(["a"] * 10)
    fd = table.shared_fd()
    del table
    gc.collect()
    assert _memfd_entries() == before and not os.path.exists(f"/proc/self/fd/{fd}")


def test_the_file_is_sealed_and_mapped_read_only() -> None:
    table = RecordTable(["a"] * 10)
    fd = table.shared_fd()
    assert fd is not None
    with pytest.raises(PermissionError):
        os.pwrite(fd, b"x", 0)
    with pytest.raises(TypeError):
        table._map[0] = 1
    table.close()


def test_a_descriptor_pickle_is_small_whatever_the_size() -> None:
    big = RecordTable([(f"/data/{i:09d}.jpg", i) for i in range(200_000)])
    blob, fds = dumps_with_fds({"samples": big})
    assert len(fds) == 1 and len(blob) < 300
    loads_with_fds(blob, [os.dup(fds[0])])["samples"].close()
    with pytest.raises(pickle.UnpicklingError, match="loads_with_fds"):
        pickle.loads(blob)
    assert pickle.loads(pickle.dumps(big))[-1] == ("/data/000199999.jpg", 199_999)
    big.close()


def test_nan_and_signed_zero_keep_their_bits() -> None:
    table = RecordTable([math.nan, -0.0, (math.inf, -math.inf)])
    assert math.isnan(table[0]) and math.copysign(1, table[1]) == -1
    assert table[2] == (math.inf, -math.inf)
    table.close()
