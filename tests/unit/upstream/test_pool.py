"""The upstream connection pool: an idle connection the server closed is seen as such, never reused."""

from __future__ import annotations

import asyncio

import httpx2
import pytest

from proxy.config import ServerSettings
from proxy.upstream.network import AsyncioBackend
from proxy.upstream.pool import pooled_transport

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@pytest.mark.anyio
async def test_a_connection_closed_by_the_server_while_idle_is_replaced():
    accepted: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        try:
            while await reader.readuntil(b"\r\n\r\n"):  # keep-alive: one answer per request head
                writer.write(RESPONSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # closed

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    transport = pooled_transport(ServerSettings(upstream=url))
    assert isinstance(transport._pool._network_backend, AsyncioBackend)  # httpx2's internals as expected
    try:

        async def get() -> bytes:
            response = await transport.handle_async_request(httpx2.Request("GET", url))
            return await response.aread()

        assert await get() == b"ok" and await get() == b"ok"
        [connection] = transport._pool.connections
        assert len(accepted) == 1 and connection.is_idle() and not connection.has_expired()

        accepted[0].close()  # the server drops the idle keep-alive connection
        for _ in range(100):
            if connection.has_expired():
                break
            await asyncio.sleep(0.01)
        assert connection.has_expired()
        assert await get() == b"ok" and len(accepted) == 2  # a new connection, no error
    finally:
        await transport.aclose()
        server.close()
