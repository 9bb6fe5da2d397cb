"""Copy-on-read (pytorch#13246): a list of strings is copied by every worker unless it is
shared (automatically, or as a StringTable)."""

from __future__ import annotations

import pickle
from typing import Any

import psutil
import pytest
import torch

import conveyor
from conveyor import DataLoader, StringTable

N = 400_000


class Names:
    """A map-style dataset of short strings, like a file list."""

    def __init__(self, items: Any):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> str:
        return self.items[i]


def _names() -> list[str]:
    return [f"sample-{i:012d}" for i in range(N)]


def _workers_private_mib(items: Any, share_records: bool = True) -> float:
    """Private memory (USS) the two workers hold after one shuffled epoch."""
    loader = DataLoader(
        Names(items),
        share_records=share_records,
        batch_size=1024,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
        collate_fn=len,
        generator=torch.Generator().manual_seed(0),
    )
    assert sum(loader) == N
    me = psutil.Process()
    private = sum(child.memory_full_info().uss for child in me.children()) / 2**20
    del loader
    return private


def test_string_table_workers_do_not_copy_the_strings() -> None:
    names = _names()
    table = StringTable(names)
    copied = _workers_private_mib(names, share_records=False)  # torch's behaviour
    shared = _workers_private_mib(table)
    list_mib = N * 70 / 2**20  # ~70 bytes per short str object plus its list slot
    assert copied > shared + 0.8 * list_mib  # each list worker copied most of the strings
    assert shared < copied / 2


def test_a_plain_list_is_shared_without_a_code_change() -> None:
    names = _names()
    copied = _workers_private_mib(names, share_records=False)
    shared = _workers_private_mib(names)  # the same list: conveyor keeps it in a table
    list_mib = N * 70 / 2**20
    assert copied > shared + 0.8 * list_mib
    assert shared < copied / 2


def test_string_table_is_a_sequence_of_the_same_values() -> None:
    names = ["a", "", "héllo", "z" * 300]
    table = StringTable(names)
    assert len(table) == 4 and list(table) == names
    assert table[-1] == names[-1] and table[1:3] == names[1:3]
    assert pickle.loads(pickle.dumps(table))[2] == "héllo"
    assert list(StringTable([b"x", b"yz"])) == [b"x", b"yz"]
    with pytest.raises(IndexError):
        table[4]
    with pytest.raises(TypeError, match="all str or all bytes"):
        StringTable(["a", b"b"])
    with pytest.raises(TypeError, match="str or bytes"):
        StringTable([1])  # type: ignore[list-item]


def test_huge_python_containers_in_a_dataset_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conveyor.string_table, "COPY_ON_READ_WARN_LEN", 1000)
    loader = DataLoader(Names([str(i) for i in range(2000)]), batch_size=500, num_workers=2)
    with pytest.warns(UserWarning, match="attribute\\(s\\) items hold over 1,000"):
        assert len(list(loader)) == 4
    table_loader = DataLoader(Names(StringTable([str(i) for i in range(2000)])), num_workers=2)
    assert len(list(table_loader)) == 2000  # no warning (warnings are errors here)
