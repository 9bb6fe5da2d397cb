"""Connections opened ahead of the requests that will use them (no request sent).

The first window of an object whose size is not known yet goes out only once the first
answer has said the size (`conveyor.storage.ranged`); each of its requests then needed a
new connection, whose handshake cost one more round trip before the block's first byte
(on a 100 ms link, ~0.1 s of every worker's first shard). `warm_pool` opens those
connections while the first answer is on its way and hands them to the aiohttp
connector's pool, where the window's requests find them.

Only the connector's ``connect`` and the connection's ``release`` are used: a connection
opened here is pooled exactly like one a finished request gave back (closed after the
session's keep-alive time if unused).
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["warm_pool", "warm_s3_pool"]


async def warm_pool(session: Any, url: str, connections: int) -> int:
    """Open up to ``connections`` connections to ``url``'s host in ``session``'s pool
    (idle ones already there count); returns how many went to the pool."""
    connector = getattr(session, "connector", None)
    if connector is None or connections <= 0:
        return 0
    from aiohttp import ClientRequest
    from yarl import URL

    request = ClientRequest("GET", URL(url), loop=asyncio.get_running_loop())
    opening = [
        asyncio.ensure_future(connector.connect(request, [], session.timeout))
        for _ in range(connections)
    ]
    try:
        await asyncio.wait(opening)
    except BaseException:  # cancelled: what opened goes to the pool, the rest is dropped
        for task in opening:
            task.cancel()
        _pool(opening)
        raise
    return _pool(opening)


def _pool(opening: list[asyncio.Future[Any]]) -> int:
    pooled = 0
    for task in opening:
        if not task.done() or task.cancelled() or task.exception() is not None:
            continue  # the requests will connect themselves, and report what fails
        task.result().release()
        pooled += 1
    return pooled


async def warm_s3_pool(fs: Any, bucket: str, connections: int) -> int:
    """`warm_pool` for the endpoint of s3fs's aiobotocore client (path-style addressing,
    as for S3-compatible stores; elsewhere the connections may go unused)."""
    client = await fs.get_s3(bucket)
    endpoint: Any = getattr(client, "_endpoint", None)
    get_session = getattr(getattr(endpoint, "http_session", None), "_get_session", None)
    if get_session is None:  # another aiobotocore: no warming, nothing else
        return 0
    session = await get_session(None)
    return await warm_pool(session, str(endpoint.host), connections)
