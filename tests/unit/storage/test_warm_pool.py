"""`warm_pool` against a real HTTP server on 127.0.0.1: the connections it opens are the
ones the next requests use (no new handshake), and it sends nothing."""

from __future__ import annotations

import asyncio

import aiohttp

from conveyor.storage.warm_pool import warm_pool


class _Server:
    """Answers every request with "ok" on a kept-alive connection; counts connections
    and requests."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.open: list[asyncio.StreamWriter] = []
        self.accepted = asyncio.Condition()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self.accepted:
            self.connections += 1
            self.accepted.notify_all()
        self.open.append(writer)
        try:
            while (await reader.readuntil(b"\r\n\r\n")) is not None:
                self.requests += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _warm_then_get(warm: int, gets: int) -> tuple[int, int, int]:
    server = _Server()
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/object"
    try:
        async with aiohttp.ClientSession() as session:
            pooled = await warm_pool(session, url, warm)
            # the client's connections are up; the server's accepts may still be queued
            async with server.accepted:
                await asyncio.wait_for(
                    server.accepted.wait_for(lambda: server.connections >= pooled), 10
                )
            before = (server.connections, server.requests)
            assert before == (pooled, 0), before  # connected, nothing asked

            async def get() -> bytes:
                async with session.get(url) as response:
                    return await response.read()

            assert await asyncio.gather(*(get() for _ in range(gets))) == [b"ok"] * gets
        return pooled, server.connections, server.requests
    finally:
        listening.close()
        for writer in server.open:
            writer.close()
        await listening.wait_closed()


def test_the_next_requests_use_the_warmed_connections() -> None:
    pooled, connections, requests = asyncio.run(_warm_then_get(warm=3, gets=3))
    assert pooled == 3
    assert (connections, requests) == (3, 3)  # no connection opened by the requests


def test_without_warming_each_concurrent_request_opens_its_own() -> None:
    """The control: the count above is the warming's doing."""
    assert asyncio.run(_warm_then_get(warm=0, gets=3)) == (0, 3, 3)
