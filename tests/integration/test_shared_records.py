"""Large plain lists reach real worker processes as shared tables, with torch's semantics.

torch.utils.data is the oracle where it runs quickly (fork); spawn and forkserver read the
list in order and are compared with it directly.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import torch

import conveyor
import conveyor.engine.zygote as zygote_module
from conveyor.engine import shared_records

from sample_datasets import FileList, file_records

N = 3000
THRESHOLD = 1000


@pytest.fixture(autouse=True)
def _threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_records, "SHARE_MIN_RECORDS", THRESHOLD)
    monkeypatch.delenv(shared_records.ENV_SHARE_RECORDS, raising=False)


def _same(read: Any, original: Any) -> bool:
    """Equal value and identical type, all the way down."""
    if type(read) is not type(original):
        return False
    if type(original) is tuple:
        return len(read) == len(original) and all(map(_same, read, original))
    if type(original) is float:
        return struct.pack("<d", read) == struct.pack("<d", original)
    return bool(read == original)


def _items(loader: Any) -> list[tuple[Any, str, int]]:
    return [item for batch in loader for item in batch]


def _memfds() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
    with open("/proc/self/maps") as maps:
        found += [line for line in maps if "conveyor-records" in line]
    return [entry for entry in found if "conveyor-records" in entry]


def test_fork_workers_read_the_table_and_give_torchs_samples() -> None:
    records = file_records(N)
    dataset = FileList(records)
    kwargs: dict[str, Any] = dict(batch_size=7, shuffle=True, num_workers=2, collate_fn=list)
    ours = _items(
        conveyor.DataLoader(dataset, generator=torch.Generator().manual_seed(3), **kwargs)
    )
    theirs = _items(
        torch.utils.data.DataLoader(dataset, generator=torch.Generator().manual_seed(3), **kwargs)
    )
    assert len(ours) == len(theirs) == N
    assert all(_same(a[0], b[0]) for a, b in zip(ours, theirs, strict=True))
    assert {kind for _, kind, _ in ours} == {"RecordTable"}
    assert {kind for _, kind, _ in theirs} == {"list"}
    assert dataset.samples is records and type(records) is list  # the user's list untouched


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_spawned_workers_get_the_tables_handle_not_its_pickle(
    context: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[int, int]] = []
    real = zygote_module.dumps_with_fds

    def recording(obj: Any) -> tuple[bytes, list[int]]:
        blob, fds = real(obj)
        sent.append((len(blob), len(fds)))
        return blob, fds

    monkeypatch.setattr(zygote_module, "dumps_with_fds", recording)
    records = file_records(20 * THRESHOLD)
    loader = conveyor.DataLoader(
        FileList(records), batch_size=50, num_workers=2, collate_fn=list,
        multiprocessing_context=context,
    )  # fmt: skip
    items = _items(loader)
    assert all(_same(item[0], record) for item, record in zip(items, records, strict=True))
    assert {kind for _, kind, _ in items} == {"RecordTable"}
    assert len(sent) == 1 and sent[0][1] == 1  # one table, as a descriptor
    assert sent[0][0] < 20_000  # the pickle of 20,000 records alone is ~700 KB


class _FilesWithACounter(FileList):
    """Holds a multiprocessing Value: only a spawning Process may pickle it, so the workers
    are started by ``Process.start`` (not the zygote) and the table goes as a DupFd."""

    def __init__(self, records: list[Any], context: Any):
        super().__init__(records)
        self.calls = context.Value("i", 0)


@pytest.fixture(scope="module")
def _multiprocessing_heap() -> Iterator[Any]:
    """multiprocessing keeps one shared heap per process for good: open it before the leak
    guard takes its baseline."""
    yield torch.multiprocessing.get_context("spawn").Value("i", 0)


def test_workers_started_by_process_start_get_the_descriptor_too(
    _multiprocessing_heap: Any,
) -> None:
    context = torch.multiprocessing.get_context("spawn")
    records = file_records(N)
    loader = conveyor.DataLoader(
        _FilesWithACounter(records, context), batch_size=500, num_workers=2,
        collate_fn=list, multiprocessing_context=context,
    )  # fmt: skip
    items = _items(loader)
    assert [item[0] for item in items] == records
    assert {kind for _, kind, _ in items} == {"RecordTable"}


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_list_changed_between_epochs_is_seen_changed(context: str) -> None:
    records = file_records(N)
    dataset = FileList(records)
    loader = conveyor.DataLoader(
        dataset, batch_size=100, num_workers=2, collate_fn=list, multiprocessing_context=context
    )
    first = _items(loader)
    records[5] = ("changed", -1)
    records.append(("appended", 1))
    second = _items(loader)
    assert [item[0] for item in first][5] == file_records(N)[5]
    assert [item[0] for item in second] == records
    assert {kind for _, kind, _ in second} == {"RecordTable"}


def test_persistent_workers_keep_what_they_started_with_as_torchs_do() -> None:
    def epochs(module: Any) -> list[list[Any]]:
        records = file_records(N)
        loader = module.DataLoader(
            FileList(records), batch_size=100, num_workers=2, collate_fn=list,
            persistent_workers=True,
        )  # fmt: skip
        seen = [[item[0] for item in _items(loader)]]
        records[5] = ("changed", -1)  # in place: a persistent worker keeps its own copy
        seen.append([item[0] for item in _items(loader)])
        return seen

    ours, theirs = epochs(conveyor), epochs(torch.utils.data)
    assert ours == theirs and ours[1][5] != ("changed", -1)


def _reverse_my_list(worker_id: int) -> None:
    info = torch.utils.data.get_worker_info() or conveyor.get_worker_info()
    info.dataset.samples.reverse()  # in place, in this worker only
    info.dataset.samples.append(("mine", worker_id))


def test_a_worker_that_changes_its_list_changes_its_own_copy_as_torchs_do() -> None:
    def read(module: Any) -> tuple[list[Any], list[Any]]:
        records = file_records(N)
        loader = module.DataLoader(
            FileList(records), batch_size=100, num_workers=2, collate_fn=list,
            worker_init_fn=_reverse_my_list,
        )  # fmt: skip
        return [item[0] for item in _items(loader)], records

    (ours, our_records), (theirs, their_records) = read(conveyor), read(torch.utils.data)
    assert ours == theirs and ours[0] == file_records(N)[-1]
    assert our_records == their_records == file_records(N)  # the main process's list


@pytest.mark.parametrize(
    ("kwargs", "env"),
    [({"share_records": False}, ""), ({}, "0"), ({"worker_type": "thread"}, "")],
    ids=["keyword", "environment", "threads"],
)
def test_sharing_can_be_turned_off_and_threads_read_the_list(
    kwargs: dict[str, Any], env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env:
        monkeypatch.setenv(shared_records.ENV_SHARE_RECORDS, env)
    records = file_records(N)
    loader = conveyor.DataLoader(
        FileList(records), batch_size=100, num_workers=2, collate_fn=list, **kwargs
    )
    items = _items(loader)
    assert {kind for _, kind, _ in items} == {"list"}
    assert [item[0] for item in items] == records
    assert loader.share_records is kwargs.get("share_records", env != "0")


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_the_table_is_released_with_the_loader(context: str) -> None:
    before = _memfds()
    loader = conveyor.DataLoader(
        FileList(file_records(N)), batch_size=500, num_workers=2, collate_fn=list,
        multiprocessing_context=context, persistent_workers=True,
    )  # fmt: skip
    assert len(_items(loader)) == N
    assert len(_memfds()) > len(before)
    del loader
    gc.collect()
    assert _memfds() == before


def test_a_killed_worker_raises_and_the_table_is_still_released() -> None:
    before = _memfds()
    dataset = FileList(file_records(N))
    loader = conveyor.DataLoader(dataset, batch_size=100, num_workers=2, collate_fn=list)
    iterator = iter(loader)
    _, _, pid = next(iterator)[0]
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match="killed by signal"):
        for _ in iterator:
            pass
    assert len(_items(loader)) == N  # the next epoch reads the same table
    del iterator, loader
    gc.collect()
    assert _memfds() == before


_KILLED_MAIN = """
import sys, threading
sys.path.insert(0, {tests!r})
import conveyor
from conveyor.engine import shared_records
from sample_datasets import FileList, file_records

if __name__ == "__main__":
    shared_records.SHARE_MIN_RECORDS = 1000
    loader = conveyor.DataLoader(FileList(file_records(3000)), batch_size=10, num_workers=2,
                                 collate_fn=list, multiprocessing_context={context!r})
    iterator = iter(loader)
    kinds = {{next(iterator)[0][1] for _ in range(4)}}
    print("READY", *kinds, flush=True)
    threading.Event().wait()
"""


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_sigkilled_main_process_leaves_no_table_behind(context: str) -> None:
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = _KILLED_MAIN.format(tests=tests, context=context)
    shm_before = set(os.listdir("/dev/shm"))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["READY", "RecordTable"]
        tree = psutil.Process(proc.pid).children(recursive=True)
        mapping = [p for p in tree if _maps_a_table(p.pid)]
        assert mapping, "the workers should map the table"
        os.kill(proc.pid, signal.SIGKILL)  # the main process only: no clean-up of its own
        proc.wait(timeout=30)
        _, alive = psutil.wait_procs(tree, timeout=30)
        assert not alive, "a worker or the zygote outlived the main process"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    # every process that mapped the table is gone, so its memory is too; it never had a
    # name in /dev/shm, and the workers' slabs were unlinked by the workers
    assert not [e for e in set(os.listdir("/dev/shm")) - shm_before if str(proc.pid) in e]


def _maps_a_table(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as maps:
            return "conveyor-records" in maps.read()
    except OSError:
        return False


def test_only_what_cannot_be_shared_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conveyor.string_table, "COPY_ON_READ_WARN_LEN", THRESHOLD)

    class Both:
        def __init__(self) -> None:
            self.samples = file_records(N)  # plain: shared, not reported
            self.meta = [{"id": i} for i in range(N)]  # dicts: copied by every worker

        def __len__(self) -> int:
            return N

        def __getitem__(self, i: int) -> Any:
            return self.samples[i], self.meta[i]["id"]

    loader = conveyor.DataLoader(Both(), batch_size=500, num_workers=2, collate_fn=list)
    with pytest.warns(UserWarning, match="attribute\\(s\\) meta hold over 1,000") as caught:
        assert len(_items(loader)) == N
    assert len(caught) == 1 and "by itself unless share_records=False" in str(caught[0].message)
