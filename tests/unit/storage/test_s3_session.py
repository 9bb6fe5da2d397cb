"""Forked workers inherit what botocore parsed in the parent (the S3 service model): their
first S3 client is cheap, not a tenth of a second of CPU each (the S7 first batch with 8
process workers)."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection
from typing import Any, cast

import pytest

from conveyor.storage import get_filesystem

pytest.importorskip("s3fs")

URL = "s3://bucket/shard-0.tar"
OPTIONS = {
    "key": "k",
    "secret": "s",
    "client_kwargs": {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"},
}


def _s3fs() -> Any:
    """The s3fs file system conveyor makes for ``URL`` in this process."""
    return cast(Any, get_filesystem(URL, OPTIONS)).fs


def _parsed_models(fs: object) -> list[str]:
    """What the data loader of ``fs``'s session has parsed already (none: nothing yet)."""
    session = getattr(fs, "session", None)
    if session is None:
        return []
    loader = session.get_component("data_loader")
    return sorted(str(key[1]) for key in loader._cache if key[0] == "load_service_model")


def _child(conn: Connection) -> None:
    fs = _s3fs()  # made in the worker, as a worker opens a shard
    conn.send(_parsed_models(fs))
    conn.close()


def test_a_forked_worker_starts_with_the_parsed_s3_model() -> None:
    parent = _s3fs()
    parent.connect()  # the main process made a client (it listed a glob, say)
    assert "s3" in _parsed_models(parent)
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    worker = context.Process(target=_child, args=(theirs,))
    worker.start()
    theirs.close()
    try:
        assert ours.poll(60)
        assert "s3" in ours.recv()  # before its first client: nothing to parse again
    finally:
        worker.join(30)
        ours.close()
    assert worker.exitcode == 0


_PREPARE = """
import sys
from conveyor.datapipes.iter import TarShards
from conveyor.datapipes.loading import list_once
pipe = TarShards(["s3://bucket/a.tar", "s3://bucket/b.tar"], decode=None,
                 storage_options={OPTIONS!r})
assert "s3fs" not in sys.modules
list_once(pipe)  # what the loader does in the main process before workers start
from conveyor.storage import s3_source
loader = getattr(s3_source, "_loader", None)
print("s3fs" in sys.modules, loader is not None and any(
    key[:2] == ("load_service_model", "s3") for key in loader._cache))
"""


def test_the_main_process_prepares_a_url_list_s_file_system_before_workers_fork() -> None:
    """A URL list (no glob: nothing to list): the main process still imports the driver
    and parses the S3 model, so that forked workers do not each do it."""
    import subprocess
    import sys

    script = _PREPARE.replace("{OPTIONS!r}", repr(OPTIONS))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]
