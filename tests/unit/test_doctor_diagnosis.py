"""The doctor's rules on synthetic measurements (no loaders run)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conveyor import StringTable
from conveyor.doctor import LoaderFacts, ranks
from conveyor.doctor.containers import MIN_ITEMS, LargeContainer, large_containers
from conveyor.doctor.diagnosis import cores_for_workers, diagnose
from conveyor.doctor.measure import Measurement
from conveyor.doctor.memory import copy_on_read
from conveyor.doctor.ranks import across_ranks
from conveyor.stats.figures import WorkerStats
from conveyor.stats.report import LoaderStats
from conveyor.stats.requests import RequestCounts
from conveyor.torch_compat import TorchDataset
from conveyor.transport.options import ENV_SHM_MAX_BYTES

FACTS = LoaderFacts(num_workers=2, worker_type="process", in_order=True, prefetch_factor=2, cpus=8)


def _run(
    wait_ms: float,
    step_ms: float,
    busy_ms: float,
    cpu_ms: float,
    ready: float = 0.0,
    batches: int = 101,
    **extra: float,
) -> Measurement:
    n = batches - 1
    workers = tuple(
        WorkerStats(w, n // 2, busy_ms / 1e3 * n / 2, cpu_ms / 1e3 * n / 2, 0.0, busy_ms / 1e3)
        for w in range(2)
    )
    stats = LoaderStats(
        batches=batches,
        samples=batches,
        wait_s=wait_ms / 1e3 * n,
        compute_s=step_ms / 1e3 * n,
        workers=workers,
        ready_batches=int(ready * batches),
        ready_wait_s=wait_ms / 1e3 * n * ready,
    )
    wall = (wait_ms + step_ms) / 1e3 * n
    return Measurement(
        stats,
        wall,
        extra.get("gc_s", 0.0),
        3,
        main_cpu_s=extra.get("main_cpu", 0.1) * wall,
        loop_cpu_s=0.0,
        cpu_queue_s=extra.get("queued_s", 0.0),
    )


def test_the_issue_s_run_blames_the_main_process_not_the_workers() -> None:
    """98 % of batches ready, workers busy 18 %: adding workers is not the advice."""
    run = _run(wait_ms=4, step_ms=10, busy_ms=5, cpu_ms=5, ready=0.98)
    diagnosis = diagnose(run, floor_s=0.010, facts=FACTS)
    assert diagnosis.bottleneck == "main process (transport)"
    assert "num_workers" not in diagnosis.fix.changes


def test_a_keeping_up_loader_gets_no_fix() -> None:
    diagnosis = diagnose(_run(0.1, 10, 5, 5, ready=1.0), floor_s=0.010, facts=FACTS)
    assert diagnosis.bottleneck == "training step" and not diagnosis.fix.applicable


def test_cpu_bound_workers_get_the_cpus_the_step_needs_and_a_gain() -> None:
    diagnosis = diagnose(_run(10, 10, 40, 40), floor_s=0.010, facts=FACTS)
    assert diagnosis.fix.changes == {"num_workers": 5}  # 40 ms * 1.2 / 10 ms
    assert abs(diagnosis.predicted_gain - (20 / 10 - 1)) < 1e-9  # the step's floor


def test_waiting_workers_are_io_unless_the_cpu_queue_explains_the_wait() -> None:
    io = diagnose(_run(10, 10, 40, 2), floor_s=0.010, facts=FACTS)
    assert io.bottleneck == "I/O latency"
    starved = diagnose(_run(10, 10, 40, 2, queued_s=3.0), floor_s=0.010, facts=FACTS)
    assert starved.bottleneck.startswith("worker CPU")


def _remote(
    run: Measurement, requests: int, objects: int, waits: int, wait_s: float
) -> Measurement:
    counts = RequestCounts(
        requests=requests, objects=objects, read_waits=waits, read_wait_us=round(wait_s * 1e6)
    )
    return dataclasses.replace(run, stats=dataclasses.replace(run.stats, requests=counts))


def test_readers_waiting_for_blocks_get_read_ahead_and_its_predicted_gain() -> None:
    """100 batches of 40 ms busy (2 on a CPU) over 2 workers: 3.8 s off a CPU, of which
    the readers waited 3.6 s in 100 waits (36 ms each), 100 blocks of 10 objects. With 16
    blocks ahead a reader waits once per object: 10 waits stay, 3.24 s go, 32.4 ms a
    batch; 7.6 ms busy per batch over 2 workers: 3.8 ms, not the 20 ms measured."""
    waiting = _run(wait_ms=10, step_ms=10, busy_ms=40, cpu_ms=2)
    run = _remote(waiting, requests=100, objects=10, waits=100, wait_s=3.6)
    diagnosis = diagnose(run, floor_s=0.002, facts=FACTS)
    assert diagnosis.bottleneck == "remote reads"
    assert diagnosis.fix.read_ahead == 16 and diagnosis.fix.applicable
    assert "RemoteOptions(read_ahead=16" in diagnosis.fix.description
    assert diagnosis.fix.changes == {}  # the counterfactual changes the read-ahead only
    assert diagnosis.predicted_period_s == pytest.approx(0.0038)
    assert diagnosis.predicted_gain == pytest.approx(0.020 / 0.0038 - 1)
    assert "100 waits of 36.0 ms" in diagnosis.evidence


def test_remote_reads_that_read_ahead_would_not_shorten_stay_io_latency() -> None:
    waiting = _run(wait_ms=10, step_ms=10, busy_ms=40, cpu_ms=2)
    # the readers waited little of the workers' time off a CPU: something else is slow
    assert diagnose(_remote(waiting, 100, 10, 100, 1.0), 0.002, FACTS).bottleneck == "I/O latency"
    # one block per object: a reader already waits once an object, read-ahead saves nothing
    one_block = _remote(waiting, 100, 100, 100, 3.6)
    assert diagnose(one_block, 0.002, FACTS).bottleneck == "I/O latency"
    # already read ahead: a wait an object, however many blocks each has
    read_ahead = _remote(waiting, 100, 10, 10, 3.6)
    assert diagnose(read_ahead, 0.002, FACTS).bottleneck == "I/O latency"


def test_gc_pauses_that_explain_the_wait() -> None:
    run = _run(10, 10, 5, 5, ready=0.9, gc_s=0.8)
    assert diagnose(run, floor_s=0.010, facts=FACTS).fix.gc_freeze


def test_no_workers_gets_workers() -> None:
    facts = LoaderFacts(0, "process", True, None, 8)
    run = _run(20, 10, 0, 0)
    diagnosis = diagnose(run, floor_s=0.010, facts=facts)
    assert diagnosis.bottleneck == "loading in the training loop"
    assert diagnosis.fix.changes == {"num_workers": 3}


def _cpu_run(idle: float | None, queued_s: float, cpu_ms: float = 8.0) -> Measurement:
    run = _run(wait_ms=10, step_ms=4, busy_ms=cpu_ms, cpu_ms=cpu_ms)
    return dataclasses.replace(run, idle_cores=idle, cpu_queue_s=queued_s)


def test_a_new_worker_takes_its_share_from_other_jobs_on_a_busy_machine() -> None:
    """2 CPUs, none idle, the workers runnable twice as long as they ran (share 1/2):
    four threads want the CPUs, so two workers get 2 * 2/5 of them, not the idle 0."""
    facts = LoaderFacts(1, "process", True, 2, cpus=2)
    run = _cpu_run(idle=0.0, queued_s=0.0)
    on_cpu = sum(w.cpu_s for w in run.stats.workers)
    busy = _cpu_run(idle=0.0, queued_s=on_cpu)  # waited as long for a CPU as it ran
    wall = busy.wall_s
    others = 2 / 0.5 - 2 * on_cpu / wall  # C / share - runnable workers
    assert cores_for_workers(busy, facts, 2) == pytest.approx(2 * 2 / (others + 2))
    assert 0.5 < cores_for_workers(busy, facts, 2) < 2


def test_an_idle_machine_gives_each_new_worker_a_cpu() -> None:
    facts = LoaderFacts(1, "process", True, 2, cpus=16)
    run = _cpu_run(idle=14.5, queued_s=0.01)  # a little queueing noise: CPUs were idle
    assert cores_for_workers(run, facts, 4) == pytest.approx(4.0, rel=0.1)


def test_the_pin_stage_that_sets_the_pace_is_named() -> None:
    run = _run(wait_ms=10, step_ms=6, busy_ms=2, cpu_ms=2)
    stats = dataclasses.replace(run.stats, pin_s=0.015 * 100, pins=100)
    diagnosis = diagnose(dataclasses.replace(run, stats=stats), floor_s=0.006, facts=FACTS)
    assert diagnosis.bottleneck == "pin thread"
    assert diagnosis.fix.changes == {"pin_memory": False}
    assert diagnosis.predicted_period_s == pytest.approx(0.006)
    assert stats.verdict().kind == "pin memory"  # summary() says the same


def test_scarce_shared_memory_is_named_before_the_main_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = _run(wait_ms=20, step_ms=4, busy_ms=5, cpu_ms=5, ready=0.95)
    note = "the budget (CONVEYOR_SHM_MAX_BYTES) of 1 bytes is used up"  # parentheses kept
    scarce = dataclasses.replace(run, shm_note=note)
    monkeypatch.delenv(ENV_SHM_MAX_BYTES, raising=False)
    diagnosis = diagnose(scarce, floor_s=0.004, facts=FACTS)
    assert diagnosis.bottleneck == "shared memory"
    assert f"too scarce for the batches ({note})" in diagnosis.evidence
    assert "--shm-size" in diagnosis.fix.description and not diagnosis.fix.applicable
    monkeypatch.setenv(ENV_SHM_MAX_BYTES, "1")
    capped = diagnose(scarce, floor_s=0.004, facts=FACTS)
    assert capped.fix.environ == {ENV_SHM_MAX_BYTES: None} and capped.fix.applicable


def test_one_rank_alone_keeps_its_own_verdict() -> None:
    run = _run(10, 10, 40, 40)
    diagnosis = diagnose(run, floor_s=0.010, facts=FACTS)
    assert across_ranks(diagnosis, run, 0.010) is diagnosis


def _grown(mb: float) -> Measurement:
    run = _run(wait_ms=0.1, step_ms=10, busy_ms=2, cpu_ms=2, ready=1.0)
    start = 5_000_000
    return dataclasses.replace(run, worker_memory=((start, start + int(mb * 1e6)),) * 2)


NAMES = LargeContainer("names", "list", 300_000, ("str",), 24_000_000)


def test_grown_process_workers_blame_the_largest_container_and_name_a_string_table() -> None:
    records = LargeContainer("records", "list", 200_000, ("dict",), 60_000_000)
    finding = copy_on_read(_grown(3.0), FACTS, [records, NAMES], share_records=True)
    assert finding is not None and finding.attribute == "records"
    assert "as columns" in finding.fix and not finding.replace_with_table
    finding = copy_on_read(_grown(3.0), FACTS, [NAMES], share_records=False)
    assert finding is not None and "conveyor.StringTable(dataset.names)" in finding.fix
    assert "share_records=True" in finding.fix and finding.replace_with_table
    assert finding.predicted_saving_bytes == pytest.approx(3e6)
    assert finding.epoch_bytes == 24_000_000  # every item read once by the epoch's end
    assert "3.0 MB" in finding.evidence and "list of 300,000 str" in finding.evidence
    numbers = LargeContainer("labels", "list", 300_000, ("int",), 8_400_000)
    for_numbers = copy_on_read(_grown(2.0), FACTS, [numbers], True)
    assert for_numbers is not None and "NumPy array" in for_numbers.fix


def test_no_memory_finding_without_growth_a_container_or_process_workers() -> None:
    assert copy_on_read(_grown(0.2), FACTS, [NAMES], share_records=False) is None
    assert copy_on_read(_grown(3.0), FACTS, [], share_records=False) is None
    threads = dataclasses.replace(FACTS, worker_type="thread")
    assert copy_on_read(_grown(3.0), threads, [NAMES], share_records=False) is None


def test_large_containers_skips_shared_tables_and_looks_into_wrapped_datasets() -> None:
    class Inner(TorchDataset):  # type: ignore[misc]
        def __init__(self) -> None:
            self.paths = [f"p{i}" for i in range(MIN_ITEMS)]
            self.small = list(range(10))

    class Outer:
        def __init__(self) -> None:
            self.dataset = Inner()
            self.labels = list(range(1000, 1000 + MIN_ITEMS))
            self.table = StringTable(["a"] * 10)

    found = large_containers(Outer())
    assert {c.path for c in found} == {"dataset.paths", "labels"}
    assert [c.path for c in large_containers(Outer(), shared=("labels",))] == ["dataset.paths"]
    paths = next(c for c in found if c.path == "dataset.paths")
    assert paths.strings and paths.length == MIN_ITEMS and paths.objects_bytes > 40 * MIN_ITEMS


def test_a_rank_adopting_a_remote_reads_fix_runs_its_read_ahead_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every rank must run the slowest rank's counterfactual (a step holding collectives
    would wait for a rank that does not): its read-ahead comes across with the verdict."""
    waiting = _run(wait_ms=10, step_ms=10, busy_ms=40, cpu_ms=2)
    slow = diagnose(_remote(waiting, 100, 10, 100, 3.6), floor_s=0.002, facts=FACTS)
    mine = diagnose(_run(0.1, 10, 5, 5, ready=1.0), floor_s=0.010, facts=FACTS)
    theirs = ranks._as_record(1, slow, waiting)
    monkeypatch.setattr(ranks, "world_and_rank", lambda: (2, 0))
    monkeypatch.setattr(
        ranks.RankCollectives,
        "all_texts",
        lambda self, text: [text, json.dumps(theirs)],
    )
    adopted = ranks.across_ranks(mine, _run(0.1, 10, 5, 5, ready=1.0), 0.010)
    assert adopted.fix.read_ahead == 16 and adopted.fix.applicable
    assert adopted.bottleneck == "rank imbalance"
