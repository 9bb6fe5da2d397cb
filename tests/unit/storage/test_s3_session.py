"""Forked workers inherit what botocore parsed in the parent (the S3 service model): their
first S3 client is cheap, not a tenth of a second of CPU each (the S7 first batch with 8
process workers)."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection

import pytest

from conveyor.storage import get_filesystem

pytest.importorskip("s3fs")

URL = "s3://bucket/shard-0.tar"
OPTIONS = {
    "key": "k",
    "secret": "s",
    "client_kwargs": {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"},
}


def _parsed_models(fs: object) -> list[str]:
    """What the data loader of ``fs``'s session has parsed already (none: nothing yet)."""
    session = getattr(fs, "session", None)
    if session is None:
        return []
    loader = session.get_component("data_loader")
    return sorted(str(key[1]) for key in loader._cache if key[0] == "load_service_model")


def _child(conn: Connection) -> None:
    fs = get_filesystem(URL, OPTIONS).fs  # made in the worker, as a worker opens a shard
    conn.send(_parsed_models(fs))
    conn.close()


def test_a_forked_worker_starts_with_the_parsed_s3_model() -> None:
    parent = get_filesystem(URL, OPTIONS).fs
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
