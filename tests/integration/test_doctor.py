"""loader.doctor() on seeded scenarios: the top-1 diagnosis, its fix, and the
counterfactual run beside the prediction.

Every scenario is small (tens of batches of a few ms each). Costs are simulated the way
the scenario has them: a CPU-bound cost spins in Python, a latency sleeps (I/O), the
training step blocks (a GPU step) or spins (a CPU step). Top-1 diagnoses are asserted;
gains only where the scenario leaves no doubt about their direction (this machine's
two shared cores make figures noisy: docs/benchmarks.md has the measured ones).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np
import pytest
import torch
from remote_servers import HttpServer

from conveyor import DataLoader, StringTable, TarShards
from conveyor.engine.loop import base_iterator
from conveyor.storage import RemoteOptions
from conveyor.storage.read_window import read_ahead_floor
from conveyor.transport.options import ENV_SHM_MAX_BYTES
from conveyor.vision import CenterCropDecoder

from sample_datasets import Frames, Photos, spin


def _blocked_step(seconds: float) -> Any:
    def step(batch: Any) -> None:
        time.sleep(seconds)  # a GPU step: the loop waits, no CPU used

    return step


class Items:
    """Items costing ``spin_s`` of Python CPU and ``sleep_s`` of latency each."""

    def __init__(self, n: int, spin_s: float = 0.0, sleep_s: float = 0.0) -> None:
        self.n, self.spin_s, self.sleep_s = n, spin_s, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if self.spin_s:
            spin(self.spin_s)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return i


class SlowClass(Items):
    """One class of samples (every 16th) is 40x slower to fetch than the others."""

    def __getitem__(self, i: int) -> int:
        time.sleep(0.08 if i % 16 == 0 else 0.002)
        return i


def _slow_collate(batch: list[int]) -> list[int]:
    spin(0.012)
    return batch


def test_a_loader_that_is_not_the_bottleneck() -> None:
    loader = DataLoader(Items(200), batch_size=4, num_workers=1, worker_type="thread")
    report = loader.doctor(_blocked_step(0.01), batches=24)
    assert report.bottleneck == "training step"
    assert report.diagnosis.predicted_gain == 0 and report.counterfactual is None
    assert report.floor_s >= 0.009  # headspace: the step alone


def test_io_latency_needs_more_workers_and_the_run_confirms_it() -> None:
    loader = DataLoader(Items(400, sleep_s=0.01), batch_size=2, num_workers=1, worker_type="thread")
    report = loader.doctor(_blocked_step(0.004), batches=24)
    assert report.bottleneck == "I/O latency"
    assert report.diagnosis.fix.changes["num_workers"] >= 5  # 20 ms * 1.2 / 4 ms
    assert report.diagnosis.predicted_gain > 1.0
    assert report.measured_gain is not None and report.measured_gain > 0.8


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_remote_reads_one_block_at_a_time_get_read_ahead_and_the_run_confirms_it(
    http_server: HttpServer, worker_type: str
) -> None:
    """Tar shards over a store answering 30 ms late (``/slow/0.03/``), read in 2 KiB
    blocks one at a time (``read_ahead=1, read_ahead_max=1``): 15 round trips a 30 kB
    shard. The counterfactual run reads 16 blocks ahead (autotune's floor, in the main
    process and sent to the workers) and goes several times faster."""
    urls = [f"{http_server.url}/slow/0.03/shards/part-{i:03d}.tar" for i in range(6)]
    one_block = RemoteOptions(read_ahead=1, read_ahead_max=1)
    shards = TarShards(urls, decode=None, block_size=2048, remote=one_block)
    loader = DataLoader(shards, batch_size=2, num_workers=2, worker_type=worker_type)
    report = loader.doctor(_blocked_step(0.002), batches=16)
    assert report.bottleneck == "remote reads", report.text()
    assert (
        report.diagnosis.fix.read_ahead == 16
        and "read_ahead=16" in report.diagnosis.fix.description
    )
    requests = report.run.stats.requests
    assert requests.objects >= 2 and requests.read_waits > 2 * requests.objects
    assert report.diagnosis.predicted_gain > 1.0
    # measured: +76 % to +1016 % on 2 shared cores, depending on the load
    assert report.measured_gain is not None and report.measured_gain > 0.3, report.text()
    after = report.counterfactual
    assert after is not None and after.run.stats.requests.read_wait_s < requests.read_wait_s / 2
    assert read_ahead_floor(2048) == 0  # the floor was the counterfactual's only
    assert json.loads(report.to_json())["remote"]["objects"] == requests.objects


def test_gil_bound_python_transform_wants_process_workers() -> None:
    loader = DataLoader(Items(400, spin_s=0.003), batch_size=2, num_workers=2, worker_type="thread")
    report = loader.doctor(_blocked_step(0.002), batches=24)
    assert report.bottleneck == "GIL (thread workers)"
    assert report.diagnosis.fix.changes["worker_type"] == "process"
    # summary() does not call the loader blameless while its threads hold the GIL
    assert not report.run.stats.summary().endswith("the training step is the bottleneck")


def test_cpu_bound_decode_with_too_few_workers() -> None:
    loader = DataLoader(Items(400, spin_s=0.004), batch_size=2, num_workers=1)
    report = loader.doctor(_blocked_step(0.004), batches=24)
    assert report.bottleneck == "worker CPU (decode, transforms)"
    assert report.diagnosis.fix.changes == {"num_workers": 2}
    assert "CropDecoder" not in report.diagnosis.fix.description  # no JPEG decoded here


def test_collate_bound() -> None:
    loader = DataLoader(Items(400), batch_size=2, num_workers=1, collate_fn=_slow_collate)
    report = loader.doctor(_blocked_step(0.006), batches=24)
    assert report.bottleneck == "collate_fn"
    assert "collate_fn" in report.diagnosis.evidence


def test_one_slow_sample_class_holds_an_in_order_loader_back() -> None:
    loader = DataLoader(SlowClass(400), batch_size=2, num_workers=4, worker_type="thread")
    report = loader.doctor(_blocked_step(0.004), batches=40)
    assert report.bottleneck == "slow samples"
    assert report.diagnosis.fix.changes == {"in_order": False}
    assert report.run.stats.verdict().kind == "slow batches"  # summary() says the same


class _SlowToUnpickle:
    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return _rebuilt_slowly, (self.value,)


def _rebuilt_slowly(value: int) -> int:
    spin(0.006)
    return value


class CheapToMake:
    def __len__(self) -> int:
        return 400

    def __getitem__(self, i: int) -> _SlowToUnpickle:
        return _SlowToUnpickle(i)


def test_batches_ready_but_slow_to_receive_is_the_main_process() -> None:
    loader = DataLoader(CheapToMake(), batch_size=None, num_workers=2, collate_fn=lambda x: x)
    report = loader.doctor(_blocked_step(0.003), batches=24)
    assert report.bottleneck == "main process (transport)"
    assert report.diagnosis.fix.changes == {"worker_type": "thread"}
    assert report.measured_gain is not None and report.measured_gain > 0.3


def test_report_reads_in_a_terminal_and_as_json() -> None:
    loader = DataLoader(Items(200, sleep_s=0.004), batch_size=2, num_workers=1)
    report = loader.doctor(_blocked_step(0.002), batches=12, counterfactual=False)
    text = report.text()
    assert "bottleneck:" in text and "top fix:" in text and "worker 0: busy" in text
    data = json.loads(report.to_json())
    assert data["bottleneck"] == report.bottleneck
    assert data["workers"][0]["batches"] > 0 and data["measured_gain"] is None


def test_doctor_without_a_step_uses_the_last_epoch_s_and_checks_batches() -> None:
    loader = DataLoader(Items(16), batch_size=2)
    for _ in loader:
        time.sleep(0.005)
    report = loader.doctor(batches=6)
    assert report.floor_s >= 0.004
    with pytest.raises(ValueError, match="batches >= 4"):
        loader.doctor(batches=2)


class ManyObjects(Items):
    """Samples of many small containers: a loop that keeps them fills the heap."""

    def __getitem__(self, i: int) -> list[list[int]]:
        return [[i, j] for j in range(1000)]


def test_gc_pauses_over_a_large_heap_are_found_and_freezing_helps() -> None:
    heap = [[i] for i in range(300_000)]  # live objects every full collection scans again
    kept: list[Any] = []

    def step(batch: Any) -> None:
        kept.append(batch)  # the loop keeps what it saw (logged outputs, a replay buffer)
        time.sleep(0.004)

    loader = DataLoader(
        ManyObjects(4000), batch_size=4, num_workers=2, worker_type="thread", collate_fn=list
    )
    report = loader.doctor(step, batches=64)
    assert report.bottleneck == "GC pauses"
    assert report.diagnosis.fix.gc_freeze and report.run.gc_collections > 0
    assert report.measured_gain is not None
    kept.clear()
    del heap


class Planes(Items):
    """512 kB uint8 planes: cheap to make, costly to normalise."""

    def __getitem__(self, i: int) -> Any:
        return np.full((512, 1024), i % 251, dtype=np.uint8)


def test_the_pin_thread_is_measured_and_named_when_it_sets_the_pace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # without an accelerator conveyor (as torch) skips pinning: let its pin stage run
    monkeypatch.setattr(base_iterator, "pin_memory_available", lambda device="": True)
    loader = DataLoader(
        Planes(400), batch_size=8, num_workers=2, pin_memory=True, collate_fn=Frames
    )
    report = loader.doctor(_blocked_step(0.006), batches=24)
    stats = report.run.stats
    assert stats.pins >= 23 and report.run.pin_per_batch_s > 0
    assert report.bottleneck == "pin thread"
    assert report.diagnosis.fix.changes == {"pin_memory": False}
    assert report.measured_gain is not None and report.measured_gain > 0.3
    assert stats.verdict().kind == "pin memory"  # summary() says the same
    assert "add workers" not in stats.summary()


class Images(Items):
    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((4, 512, 1024), i % 251, dtype=torch.uint8)  # 2 MB


def test_scarce_shared_memory_is_named_and_lifting_the_cap_is_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_SHM_MAX_BYTES, str(1 << 20))  # a container's small /dev/shm
    loader = DataLoader(Images(400), batch_size=4, num_workers=2)
    with pytest.warns(UserWarning, match="too little shared memory"):
        report = loader.doctor(_blocked_step(0.004), batches=24)
    assert report.bottleneck == "shared memory"
    assert report.run.shm_note is not None
    assert report.diagnosis.fix.environ == {ENV_SHM_MAX_BYTES: None}
    assert os.environ[ENV_SHM_MAX_BYTES] == str(1 << 20)  # restored after the run
    assert report.counterfactual is not None and report.counterfactual.run.shm_note is None
    assert report.measured_gain is not None and report.measured_gain > 0.3
    assert "add workers" not in report.run.stats.summary()


class PhotosAtSize(Photos):
    """The same crop, decoded at the IDCT scale it needs (conveyor.vision)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.decode = CenterCropDecoder(224)

    def __getitem__(self, i: int) -> Any:
        return self.decode(self.data)


def test_full_jpeg_decodes_that_are_cropped_get_the_crop_aware_decoder_named() -> None:
    report = DataLoader(Photos(200), batch_size=2, num_workers=1).doctor(
        _blocked_step(0.002), batches=12
    )
    assert report.bottleneck == "worker CPU (decode, transforms)"
    assert "RandomResizedCropDecoder" in report.diagnosis.fix.description
    assert "Pillow decoding the whole JPEG" in report.diagnosis.evidence
    at_size = DataLoader(PhotosAtSize(200), batch_size=2, num_workers=1).doctor(
        _blocked_step(0.0005), batches=12, counterfactual=False
    )
    assert at_size.bottleneck == "worker CPU (decode, transforms)"
    assert "CropDecoder" not in at_size.diagnosis.fix.description  # decoded at size already


class Names:
    """A dataset holding its file names as a Python list: one str object a sample."""

    def __init__(self, names: Any) -> None:
        self.names = names

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> int:
        return len(str(self.names[i]))  # reading the item writes its reference count


def _names(n: int) -> list[str]:
    return [f"images/train/{i:08d}_{i * 7919 % 100003}.jpg" for i in range(n)]


def _names_loader(names: Any, share_records: bool = False) -> DataLoader[Any]:
    return DataLoader(
        Names(names),
        batch_size=32,
        num_workers=2,
        shuffle=True,
        share_records=share_records,
        multiprocessing_context="fork",
    )


def test_copy_on_read_is_a_memory_finding_and_a_string_table_removes_it() -> None:
    names = _names(300_000)
    loader = _names_loader(names)
    report = loader.doctor(_blocked_step(0.002), batches=48)
    memory = report.memory
    assert memory is not None and memory.attribute == "names"
    assert "conveyor.StringTable(dataset.names)" in memory.fix
    assert memory.growth_bytes > 1.5e6  # ~3 MB each over 1,536 random samples
    assert memory.epoch_bytes > 15e6  # 300k str objects: a copy each by the epoch's end
    assert report.bottleneck == "training step"  # the speed verdict stands beside it
    after = report.memory_counterfactual
    assert after is not None and after.growth_bytes is not None
    assert after.growth_bytes < 0.3 * memory.growth_bytes  # measured with a StringTable
    assert loader.dataset.names is names  # restored after the counterfactual
    assert "memory (a memory finding, beside the speed verdict)" in report.text()
    data = json.loads(report.to_json())["memory"]
    assert data["attribute"] == "names" and data["measured_saving_mb_per_worker"] > 1.0
    # the same names in a StringTable, or shared by the loader itself: nothing to find
    for shared in (
        _names_loader(StringTable(names)),
        _names_loader(names, share_records=True),
    ):
        quiet = shared.doctor(_blocked_step(0.002), batches=48, counterfactual=False)
        assert quiet.run.worker_memory and quiet.memory is None


def test_a_list_of_record_dicts_gets_columns_advised() -> None:
    records = [{"file": name, "label": i} for i, name in enumerate(_names(150_000))]
    report = _names_loader(records, share_records=True).doctor(_blocked_step(0.002), batches=32)
    memory = report.memory
    assert memory is not None and memory.container.item_types == ("dict",)
    assert "as columns" in memory.fix and "StringTable" in memory.fix
    after = report.memory_counterfactual
    assert after is not None and after.growth_bytes is None  # not rewritten by the doctor
