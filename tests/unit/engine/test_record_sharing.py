"""The worker view of a dataset: which lists become tables, and when a table is rebuilt."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import ConcatDataset, Dataset, Subset
from conveyor.engine import shared_records
from conveyor.engine.shared_records import RecordSharing, share_records_default
from conveyor.transport.record_table import RecordTable

N = 50  # SHARE_MIN_RECORDS for these tests


@pytest.fixture(autouse=True)
def _small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_records, "SHARE_MIN_RECORDS", N)


@pytest.fixture
def sharing() -> Iterator[RecordSharing]:
    owner = RecordSharing()
    yield owner
    owner.close()


class Files(Dataset[Any]):
    def __init__(self, count: int = N) -> None:
        self.samples = [(f"/data/{i:05d}.jpg", i % 7) for i in range(count)]
        self.classes = ["cat", "dog"]  # short: left alone
        self.root = "/data"

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Any:
        return self.samples[index]


def test_a_large_plain_list_attribute_is_read_from_a_table_in_a_copy(
    sharing: RecordSharing,
) -> None:
    dataset = Files()
    original = dataset.samples
    view, shared = sharing.worker_view(dataset)
    assert shared == ("samples",)
    assert view is not dataset and type(view) is Files
    assert isinstance(view.samples, RecordTable) and list(view.samples) == original
    assert view.classes is dataset.classes and view.root == "/data"
    # the user's objects are untouched
    assert dataset.samples is original and type(original) is list
    assert [view[i] for i in range(N)] == [dataset[i] for i in range(N)]


def test_the_dataset_itself_a_dict_of_lists_and_nested_datasets(sharing: RecordSharing) -> None:
    records = [(str(i), float(i)) for i in range(N)]
    view, shared = sharing.worker_view(records)
    assert isinstance(view, RecordTable) and shared == ("dataset",)

    class Columns(Dataset[Any]):
        def __init__(self) -> None:
            self.columns = {"paths": [str(i) for i in range(N)], "labels": list(range(N))}

    columns = Columns()
    view, shared = sharing.worker_view(columns)
    assert sorted(shared) == ["columns['labels']", "columns['paths']"]
    assert type(view.columns) is dict and view.columns is not columns.columns
    assert list(view.columns["labels"]) == columns.columns["labels"]
    assert type(columns.columns["labels"]) is list

    files = Files()
    subset = Subset(files, list(range(N - 1, -1, -1)))
    view, shared = sharing.worker_view(subset)
    assert sorted(shared) == ["dataset.samples", "indices"]
    assert [view[i] for i in range(N)] == [subset[i] for i in range(N)]
    assert subset.dataset is files and type(files.samples) is list

    concat = ConcatDataset([Files(), Files()])
    view, shared = sharing.worker_view(concat)
    assert shared == ("datasets[0].samples", "datasets[1].samples")
    assert [view[i] for i in range(2 * N)] == [concat[i] for i in range(2 * N)]


def test_what_is_left_alone(sharing: RecordSharing) -> None:
    short = Files(N - 1)
    assert sharing.worker_view(short) == (short, ())
    objects = Files()
    objects.samples = [{"path": str(i)} for i in range(N)]  # type: ignore[misc]
    assert sharing.worker_view(objects) == (objects, ())

    class Slotted:
        __slots__ = ("samples",)

        def __init__(self) -> None:
            self.samples = list(range(N))

    slotted = Slotted()
    assert sharing.worker_view(slotted) == (slotted, ())

    class KeepsSelf(Files):
        def __copy__(self) -> KeepsSelf:
            return self  # a copy that is the object: changing it would change the user's

    keeps = KeepsSelf()
    assert sharing.worker_view(keeps) == (keeps, ())
    assert type(keeps.samples) is list


def test_an_unchanged_list_reuses_its_table_and_a_changed_one_is_rebuilt(
    sharing: RecordSharing,
) -> None:
    dataset = Files()
    first = sharing.worker_view(dataset).dataset.samples
    assert sharing.worker_view(dataset).dataset.samples is first  # unchanged: reused
    dataset.samples[3] = ("changed", -1)
    second = sharing.worker_view(dataset).dataset.samples
    assert second is not first and second[3] == ("changed", -1)
    with pytest.raises(ValueError, match="released"):
        first[0]  # the stale table was closed
    dataset.samples.append(("new", 0))
    third = sharing.worker_view(dataset).dataset.samples
    assert len(third) == N + 1 and third[N] == ("new", 0)
    dataset.samples = [("other", i) for i in range(N)]
    fourth = sharing.worker_view(dataset).dataset.samples
    assert list(fourth) == dataset.samples
    dataset.samples[0] = ("equal", 0)
    dataset.samples[0] = tuple(["equal", 0])  # an equal value in a new object: no rebuild
    fifth = sharing.worker_view(dataset).dataset.samples
    assert fifth[0] == ("equal", 0)
    assert sharing.worker_view(dataset).dataset.samples is fifth


def test_close_releases_every_table() -> None:
    owner = RecordSharing()
    view = owner.worker_view(Files()).dataset
    owner.close()
    with pytest.raises(ValueError, match="released"):
        view.samples[0]
    owner.close()  # idempotent
    dataset = Files()
    assert owner.worker_view(dataset) == (dataset, ())  # closed: builds nothing any more


def test_the_environment_turns_sharing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, expected in [("", True), ("1", True), ("0", False), ("off", False)]:
        monkeypatch.setenv(shared_records.ENV_SHARE_RECORDS, value)
        assert share_records_default() is expected


def test_a_copy_of_the_view_shares_the_table(sharing: RecordSharing) -> None:
    view = sharing.worker_view(Files()).dataset
    assert copy.copy(view).samples is view.samples
    assert copy.deepcopy(view).samples is view.samples
    assert os.path.exists(f"/proc/self/fd/{view.samples.shared_fd()}")


def test_an_object_reached_twice_has_one_view(sharing: RecordSharing) -> None:
    files = Files()

    class Pair(Dataset[Any]):
        def __init__(self) -> None:
            self.left = files
            self.right = files
            self.me = self

    view = sharing.worker_view(Pair()).dataset
    assert view.left is view.right and isinstance(view.left.samples, RecordTable)
