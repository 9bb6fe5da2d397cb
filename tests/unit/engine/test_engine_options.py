"""The loader's options: each concern checks itself, changes re-check, kinds are strategies."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from conveyor import DataLoader
from conveyor.engine.options import DataOptions, ErrorOptions, LoaderOptions
from conveyor.engine.process_workers import ProcessWorkers
from conveyor.engine.thread_workers import ThreadWorkers
from conveyor.engine.worker_kind import WorkerOptions
from conveyor.engine.worker_kinds import WORKER_KINDS, resolve_worker_type, worker_kind


def _data(**changes: Any) -> DataOptions:
    fields: dict[str, Any] = {
        "dataset": list(range(10)),
        "sampler": range(10),
        "batch_sampler": None,
        "batch_size": None,
        "drop_last": False,
        "collate_fn": list,
        "generator": None,
        "iterable_style": False,
    }
    fields.update(changes)
    return DataOptions(**fields)


def test_each_concern_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        WorkerOptions(kind=ThreadWorkers(), num_workers=-1)
    with pytest.raises(ValueError, match="timeout option should be non-negative"):
        WorkerOptions(kind=ThreadWorkers(), timeout_s=-1)
    with pytest.raises(ValueError, match="on_error should be one of"):
        ErrorOptions(on_error="ignore")
    with pytest.raises(ValueError, match="mutually exclusive with drop_last"):
        _data(drop_last=True)


def test_loader_options_check_across_concerns_and_on_every_change() -> None:
    options = LoaderOptions(_data(), WorkerOptions(kind=ThreadWorkers()))
    assert options.workers.tasks_in_flight == 1
    with pytest.raises(ValueError, match="profile_stages=True times the stages"):
        options.changed("", profile_stages=True)
    with pytest.raises(ValueError, match="on_error='skip' applies to map-style"):
        LoaderOptions(_data(iterable_style=True), options.workers, errors=ErrorOptions("skip"))
    more = options.changed("workers", num_workers=3, prefetch_factor=2)
    assert more.workers.tasks_in_flight == 6 and options.workers.num_workers == 0
    spec = more.fetch_spec()
    assert spec.dataset is options.data.dataset and not spec.auto_collation


def test_loader_attributes_live_in_the_options() -> None:
    loader = DataLoader(list(range(10)), batch_size=2)
    assert (loader.num_workers, loader.worker_type, loader.timeout) == (0, "process", 0)
    loader.pin_memory = True
    loader.num_workers = 2
    assert (
        loader._conveyor_options.pin.enabled and loader._conveyor_options.workers.num_workers == 2
    )
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        loader.num_workers = -1
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        loader.batch_size = 3
    loader.worker_type = "thread"
    assert isinstance(loader._conveyor_options.workers.kind, ThreadWorkers)


def test_worker_kinds_come_from_one_factory() -> None:
    assert set(WORKER_KINDS) == {"process", "thread", "ray"}
    assert isinstance(worker_kind("process"), ProcessWorkers)
    assert resolve_worker_type(None, "thread") == "thread"
    with pytest.raises(ValueError, match="worker_type should be one of"):
        worker_kind("fiber")
    with pytest.raises(ValueError, match="disagree"):
        resolve_worker_type("thread", "process")
    kind = ProcessWorkers()
    kind._zygote = object()  # type: ignore[assignment]  # a loader-lived resource
    assert isinstance(pickle.loads(pickle.dumps(kind)), ProcessWorkers)  # sent without it


def test_option_records_are_immutable_compared_by_field_and_survive_pickling() -> None:
    workers = WorkerOptions(kind=ThreadWorkers(), num_workers=2, prefetch_factor=3)
    with pytest.raises(AttributeError, match="cannot assign to field 'num_workers'"):
        workers.num_workers = 4
    with pytest.raises(AttributeError, match="cannot delete field"):
        del workers.timeout_s
    errors = ErrorOptions("skip", 3)
    assert errors == ErrorOptions(on_error="skip", max_skipped=3) != ErrorOptions("skip")
    assert hash(errors) == hash(ErrorOptions("skip", 3))
    assert repr(errors) == "ErrorOptions(max_skipped=3, on_error='skip')"
    assert pickle.loads(pickle.dumps(errors)) == errors
    with pytest.raises(ValueError, match="max_skipped should be None or an int >= 0"):
        errors.replace(max_skipped=-1)  # a copy is checked like a new record
    with pytest.raises(TypeError, match="ErrorOptions has no field 'retries'"):
        errors.replace(retries=2)
    moved = workers.replace(num_workers=0)
    assert (moved.num_workers, moved.prefetch_factor, workers.num_workers) == (0, 3, 2)
