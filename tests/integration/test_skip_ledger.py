"""One ledger of lost samples in the main process, whatever worker lost them.

Rows of the "nothing lost silently" table: bad tar data and a remote server dying, read by
worker processes and threads, must show up in the main process as samples lost
(``stats().skipped``), under one ``max_skipped`` for all workers, and in one warning at the
end of the epoch naming shards and keys; workers print nothing of their own. Raise mode
delivers every complete sample before the error. ``stats().samples`` counts samples
delivered, not batches times batch size.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from remote_servers import FaultyServer, ShardSet
from test_bad_samples import Flaky
from test_remote_faults import FAST, shard_path

from conveyor import DataLoader
from conveyor.datapipes.iter.loading import TarShards
from conveyor.formats import BadSampleWarning, SampleError, ShardWriter, read_members
from conveyor.formats.skips import drain_skips

KINDS = [(0, "process"), (2, "process"), (2, "thread")]


def write_shards(root: Path, shards: int = 4, per_shard: int = 8) -> list[str]:
    with ShardWriter(str(root / "part-%03d.tar"), max_count=per_shard) as writer:
        for i in range(shards * per_shard):
            writer.write({"__key__": f"{i:06d}", "cls": i, "txt": f"sample {i}" * 20})
    return list(writer.shards)


def corrupt_header(shard: str, member: int) -> None:
    """Damage a member's tar header checksum, as a bad disk block does."""
    with open(shard, "r+b") as archive:
        archive.seek(list(read_members(archive, shard))[member].offset + 20)
        archive.write(b"\xff")


def keys_of(batches: list[Any]) -> list[str]:
    return [key for batch in batches for key in batch["__key__"]]


@pytest.fixture(autouse=True)
def _empty_sink() -> Iterator[None]:
    drain_skips()
    yield
    drain_skips()


@pytest.mark.parametrize(("num_workers", "worker_type"), KINDS)
def test_corrupt_data_in_workers_is_counted_in_samples_in_the_main_process(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], num_workers: int, worker_type: str
) -> None:
    shards = write_shards(tmp_path)
    # shard 1 (samples 8-15), sample 10's header (2 members a sample): 10 to 15 are lost,
    # and 9 too, the sample in progress at the failure (it may be incomplete): 7 samples
    corrupt_header(shards[1], 2 * 2)
    pipe = TarShards(shards, decode=None, on_error="skip")
    loader = DataLoader(pipe, batch_size=4, num_workers=num_workers, worker_type=worker_type)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        delivered = keys_of(list(loader))
    skip_warnings = [w for w in caught if issubclass(w.category, BadSampleWarning)]
    assert len(skip_warnings) == 1, [str(w.message) for w in skip_warnings]
    message = str(skip_warnings[0].message)
    assert "skipped 7 samples" in message and shards[1] in message and "'000009'" in message
    assert loader.stats().skipped == 7
    assert sorted(delivered) == [f"{i:06d}" for i in [*range(9), *range(16, 32)]]
    assert loader.stats().samples == len(delivered) == 25
    assert "BadSampleWarning" not in capfd.readouterr().err  # no worker spoke for itself


def test_max_skipped_counts_every_worker_together(tmp_path: Path) -> None:
    shards = write_shards(tmp_path)
    corrupt_header(shards[0], 2 * 2)  # worker 0's shard: 7 lost
    corrupt_header(shards[1], 2 * 2)  # worker 1's shard: 7 lost
    pipe = TarShards(shards, decode=None, on_error="skip")
    loader = DataLoader(pipe, batch_size=2, num_workers=2, max_skipped=10)
    with pytest.raises(RuntimeError, match=r"skipped 14 samples, more than max_skipped=10"):
        list(loader)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_raise_mode_delivers_the_complete_samples_before_the_error(
    tmp_path: Path, num_workers: int
) -> None:
    shards = write_shards(tmp_path, shards=2)
    # shard 1's sample 3 (key 11): 8 and 9 are complete, 10 was in progress (may be cut)
    corrupt_header(shards[1], 2 * 3)
    loader = DataLoader(TarShards(shards, decode=None), batch_size=4, num_workers=num_workers)
    delivered: list[Any] = []
    with pytest.raises(SampleError, match="corrupt tar header"):
        for batch in loader:
            delivered.append(batch)
    assert keys_of(delivered) == [f"{i:06d}" for i in range(10)]
    assert [len(batch["__key__"]) for batch in delivered] == [4, 4, 2]  # the partial one too


@pytest.fixture
def faulty(shard_set: ShardSet, fsspec_loop: None) -> Iterator[FaultyServer]:
    server = FaultyServer(shard_set.root)
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_a_server_dying_mid_epoch_is_counted_with_workers(
    faulty: FaultyServer, shard_set: ShardSet, worker_type: str
) -> None:
    urls = [faulty.url + shard_path(shard_set, i) for i in range(6)]
    remote = dataclasses.replace(FAST, retries=1)
    pipe = TarShards(urls, decode=None, block_size=2048, remote=remote, on_error="skip")
    loader = DataLoader(pipe, batch_size=2, num_workers=2, worker_type=worker_type)
    delivered: list[str] = []
    with pytest.warns(BadSampleWarning, match=r"skipped ~\d+ samples") as caught:
        for batch in loader:
            delivered += batch["__key__"]
            if len(delivered) == 20:  # each worker read a shard whole and is in its second
                faulty.stop_serving()
    assert len([w for w in caught if w.category is BadSampleWarning]) == 1
    lost = loader.stats().skipped
    assert lost > 0 and abs(len(delivered) + lost - 48) <= 2  # estimates: +-1 per worker
    assert loader.stats().samples == len(delivered)
    assert len(set(delivered)) == len(delivered)


@pytest.mark.parametrize(("num_workers", "worker_type"), KINDS)
def test_stats_count_samples_delivered(num_workers: int, worker_type: str) -> None:
    options: dict[str, Any] = {"num_workers": num_workers, "worker_type": worker_type}
    loader = DataLoader(Flaky(200, set()), batch_size=8, drop_last=False, **options)
    assert len(list(loader)) == 25 and loader.stats().samples == 200
    loader = DataLoader(Flaky(203, set()), batch_size=8, **options)
    list(loader)
    assert loader.stats().samples == 203  # not 26 x 8 = 208
    batches = [list(range(i, i + 40)) for i in range(0, 200, 40)]
    loader = DataLoader(Flaky(200, set()), batch_sampler=batches, **options)
    list(loader)
    assert loader.stats().samples == 200  # not 5 batches x 1
    loader = DataLoader(Flaky(200, {3, 50, 51, 199}), batch_size=8, on_error="skip", **options)
    with pytest.warns(BadSampleWarning):
        got = [int(x) for batch in loader for x in torch.as_tensor(batch)]
    assert loader.stats().samples == len(got) == 196 and loader.stats().skipped == 4


@pytest.mark.parametrize(("num_workers", "worker_type"), KINDS)
def test_skips_of_a_pipe_read_outside_a_loader_are_not_reported_by_the_next_loader(
    tmp_path: Path, num_workers: int, worker_type: str
) -> None:
    """A pipe read on its own warns for itself; the next loader of the process, over good
    data, reports nothing (its sink was left empty, not holding the other pipe's records)."""
    bad = write_shards(tmp_path / "bad")
    corrupt_header(bad[1], 2)
    with pytest.warns(BadSampleWarning, match="skipped"):
        list(TarShards(bad, on_error="skip"))
    good = write_shards(tmp_path / "good", shards=2)
    loader = DataLoader(
        TarShards(good, on_error="skip"),
        batch_size=4,
        num_workers=num_workers,
        worker_type=worker_type,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", BadSampleWarning)
        assert len(keys_of(list(loader))) == 16
    assert loader.stats().skipped == 0
