"""A TCP proxy that puts a slow network between a client and a server on 127.0.0.1.

Used by the tests and by ``benchmarks/s7_object_store.py`` (scenario S7: object storage
over a network with latency) in front of SeaweedFS. Standard library only (asyncio).

The network it models, per direction of every connection:

- **latency**: every byte is delivered ``rtt / 2`` after it was sent (a delay line, so
  the first bytes of each request and of each response arrive half a round trip late and
  a request/response exchange costs one RTT);
- **connection set-up**: a new connection cannot carry data before its TCP handshake
  completes, one RTT after ``connect()`` (so the first request on a fresh connection
  costs two RTTs; TLS, which would add one or two more, is not modelled);
- **window**: at most ``window`` bytes in flight (sent, not yet acknowledged: the
  acknowledgement comes back half an RTT after delivery), as a TCP receive window does:
  one connection then moves at most ``window / rtt`` bytes per second, so a single
  stream over a long link is slower than several in parallel;
- **bandwidth**: a token bucket of ``bandwidth`` bytes per second (with ``burst`` bytes
  of credit), either one per connection or one shared by all connections and both
  directions (``shared=True``, a single access link);
- **whole requests** (``request_shaping.py``): a request rate above which the proxy answers
  ``429``/``503 SlowDown`` with ``Retry-After`` itself, a heavy tail (a share of requests
  reaches the server late), and a log of every request.

Not modelled: slow start, loss, jitter. Run it as a process (the tests and the
benchmark do) with ``python latency_proxy.py --upstream HOST:PORT --rtt-ms 25``: it
prints ``{"port": N}`` on one line once it listens, and stops when its standard input
closes or on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import IO

from request_shaping import RequestRules

__all__ = ["LinkSettings", "ProxyProcess", "TokenBucket", "serve"]

CHUNK = 256 << 10
"""Bytes read from a socket at a time (also the delay line's granularity)."""


@dataclass(frozen=True)
class LinkSettings:
    """The modelled network: round trip (s), window (bytes), bandwidth (bytes/s or None)."""

    rtt: float = 0.0
    window: int = 4 << 20
    bandwidth: float | None = None
    burst: int = 256 << 10
    shared: bool = False
    requests_per_s: float | None = None  # above it: 429/503 answered by the proxy
    burst_requests: float | None = None  # the bucket (default: one second's requests)
    throttle_status: int = 429  # or 503 (S3 SlowDown)
    retry_after: str = "seconds"  # or "date", "none"
    retry_after_s: int = 1
    slow_fraction: float = 0.0  # requests that reach the server slow_s late
    slow_s: float = 0.0
    seed: int = 0
    log: str | None = None  # a file: one JSON line per request

    def rules(self, log: IO[str] | None = None) -> RequestRules:
        return RequestRules(
            self.requests_per_s,
            self.burst_requests,
            throttle_status=self.throttle_status,
            retry_after=self.retry_after,
            retry_after_s=self.retry_after_s,
            slow_fraction=self.slow_fraction,
            slow_s=self.slow_s,
            seed=self.seed,
            log=log,
        )


class TokenBucket:
    """Bandwidth as a virtual clock: ``reserve(n)`` says when ``n`` bytes have been sent.

    The bucket holds up to ``burst`` bytes of credit; a reservation that exceeds the
    credit is scheduled after the bytes before it (first come, first served).
    """

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._free_at = 0.0  # when the link has sent everything reserved so far

    def reserve(self, size: int, now: float) -> float:
        start = max(self._free_at, now - self.burst / self.rate)
        self._free_at = start + size / self.rate
        return max(now, self._free_at)


class _Direction:
    """One direction of one connection: read, stamp a delivery time, deliver in order."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        settings: LinkSettings,
        bucket: TokenBucket | None,
        not_before: float,
    ) -> None:
        self.reader, self.writer = reader, writer
        self.settings, self.bucket = settings, bucket
        self.not_before = not_before  # the handshake: nothing leaves before this time
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.in_flight = 0
        self.arrived = asyncio.Event()
        self.drained = asyncio.Event()
        self.rules: RequestRules | None = None  # the client's direction: whole requests
        self.answers: _Direction | None = None  # where the proxy's own answers go

    def _put(self, due: float, data: bytes) -> None:
        self.queue.append((due, data))
        self.in_flight += len(data)
        self.arrived.set()

    def _shape(self, data: bytes, sent: float) -> float | None:
        """The request rules: None when the proxy answered ``data`` itself, else when it
        goes on (later for a slow request)."""
        verdict = self.rules.judge(data) if self.rules is not None and data else None
        if verdict is None:
            return sent
        if verdict.answer is not None and self.answers is not None:
            self.answers._put(sent + self.settings.rtt, verdict.answer)
            return None
        return sent + verdict.extra_delay_s

    async def pump_in(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                while self.in_flight >= self.settings.window:
                    self.drained.clear()
                    await self.drained.wait()
                data = await self.reader.read(min(CHUNK, self.settings.window - self.in_flight))
                sent = max(loop.time(), self.not_before)
                if data and self.bucket is not None:
                    sent = self.bucket.reserve(len(data), sent)
                shaped = self._shape(data, sent)
                if shaped is not None:
                    self._put(shaped + self.settings.rtt / 2, data)
                if not data:
                    return
        except (ConnectionError, OSError):
            self.queue.append((loop.time(), b""))
            self.arrived.set()

    def _acknowledge(self, size: int) -> None:
        self.in_flight -= size
        self.drained.set()

    async def pump_out(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not self.queue:
                    self.arrived.clear()
                    await self.arrived.wait()
                due, data = self.queue.popleft()
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if not data:
                    if self.writer.can_write_eof():
                        self.writer.write_eof()
                    return
                self.writer.write(data)
                await self.writer.drain()
                # The window opens when the acknowledgement is back, half an RTT later.
                loop.call_later(self.settings.rtt / 2, self._acknowledge, len(data))
        except (ConnectionError, OSError):
            return


class _Proxy:
    def __init__(self, upstream: tuple[str, int], settings: LinkSettings) -> None:
        self.upstream = upstream
        self.settings = settings
        rate, burst = settings.bandwidth, settings.burst
        self.shared = TokenBucket(rate, burst) if rate and settings.shared else None
        log = open(settings.log, "a") if settings.log else None  # noqa: SIM115 (the proxy's life)
        self.rules = settings.rules(log)

    def _bucket(self) -> TokenBucket | None:
        rate = self.settings.bandwidth
        if not rate:
            return None
        return self.shared or TokenBucket(rate, self.settings.burst)

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        handshake_done = loop.time() + self.settings.rtt
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        up = _Direction(client_r, server_w, self.settings, self._bucket(), handshake_done)
        down = _Direction(server_r, client_w, self.settings, self._bucket(), handshake_done)
        if self.rules.active:
            up.rules, up.answers = self.rules, down
        tasks = [asyncio.ensure_future(c) for c in (up.pump_in(), up.pump_out())]
        tasks += [asyncio.ensure_future(c) for c in (down.pump_in(), down.pump_out())]
        try:
            # The connection lives until the response direction ends (server closed or
            # the client went away); then both sockets close.
            await asyncio.wait([tasks[3]])
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for writer in (client_w, server_w):
                writer.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await writer.wait_closed()


async def serve(upstream: tuple[str, int], settings: LinkSettings, port: int = 0) -> asyncio.Server:
    """Listen on 127.0.0.1:``port`` (0: any free port) and proxy to ``upstream``."""
    proxy = _Proxy(upstream, settings)
    return await asyncio.start_server(proxy.handle, "127.0.0.1", port, reuse_address=True)


class ProxyProcess:
    """The proxy in a child process: ``endpoint`` is ``http://127.0.0.1:PORT``; ``close()``."""

    def __init__(self, upstream: str, settings: LinkSettings, python: str = sys.executable) -> None:
        command = [
            python, os.path.abspath(__file__), "--upstream", upstream,
            "--rtt-ms", str(settings.rtt * 1000), "--window", str(settings.window),
            "--burst", str(settings.burst),
        ]  # fmt: skip
        if settings.bandwidth:
            command += ["--bandwidth", str(settings.bandwidth)]
        if settings.shared:
            command.append("--shared")
        command += _shaping_arguments(settings)
        self.settings = settings
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout=10)
            raise RuntimeError(f"latency proxy exited with {self.process.returncode}")
        self.port = int(json.loads(line)["port"])
        self.endpoint = f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()  # the proxy stops when its stdin closes
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shaping_arguments(settings: LinkSettings) -> list[str]:
    arguments = []
    if settings.requests_per_s:
        arguments += ["--requests-per-s", str(settings.requests_per_s)]
        arguments += ["--throttle-status", str(settings.throttle_status)]
        if settings.burst_requests is not None:
            arguments += ["--burst-requests", str(settings.burst_requests)]
        arguments += ["--retry-after", settings.retry_after]
        arguments += ["--retry-after-s", str(settings.retry_after_s)]
    if settings.slow_fraction:
        arguments += [
            "--slow-fraction",
            str(settings.slow_fraction),
            "--slow-s",
            str(settings.slow_s),
        ]
        arguments += ["--seed", str(settings.seed)]
    if settings.log:
        arguments += ["--log", settings.log]
    return arguments


async def _main(args: argparse.Namespace) -> None:
    host, _, port = args.upstream.rpartition(":")
    settings = LinkSettings(
        rtt=args.rtt_ms / 1000,
        window=args.window,
        bandwidth=args.bandwidth,
        burst=args.burst,
        shared=args.shared,
        requests_per_s=args.requests_per_s,
        burst_requests=args.burst_requests,
        throttle_status=args.throttle_status,
        retry_after=args.retry_after,
        retry_after_s=args.retry_after_s,
        slow_fraction=args.slow_fraction,
        slow_s=args.slow_s,
        seed=args.seed,
        log=args.log,
    )
    server = await serve((host or "127.0.0.1", int(port)), settings, args.port)
    print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    stdin_closed = loop.run_in_executor(None, sys.stdin.buffer.read)
    stdin_closed.add_done_callback(lambda _: stop.set())
    await stop.wait()
    server.close()
    os._exit(0)  # the stdin reader thread may still block; nothing else to flush


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rtt-ms", type=float, default=0.0)
    parser.add_argument("--window", type=int, default=LinkSettings.window)
    parser.add_argument("--bandwidth", type=float, default=None, help="bytes per second")
    parser.add_argument("--burst", type=int, default=LinkSettings.burst)
    parser.add_argument("--shared", action="store_true", help="one bucket for all connections")
    parser.add_argument("--requests-per-s", type=float, default=None)
    parser.add_argument("--burst-requests", type=float, default=None)
    parser.add_argument("--throttle-status", type=int, default=429, choices=(429, 503))
    parser.add_argument("--retry-after", default="seconds", choices=("seconds", "date", "none"))
    parser.add_argument("--retry-after-s", type=int, default=1)
    parser.add_argument("--slow-fraction", type=float, default=0.0)
    parser.add_argument("--slow-s", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", default=None, help="append one JSON line per request")
    asyncio.run(_main(parser.parse_args()))
