"""The upstream connection pool (proxy/upstream/pool.py): its connections are ours (AsyncioBackend's),
installed through httpcore2's public `network_backend=`; the pool keeps what httpx2's transport gave
it; an idle connection the server closed is seen as such, never reused."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpcore2
import httpx2
import pytest

from proxy.config import ServerSettings
from proxy.upstream import pool as pool_module
from proxy.upstream.network import AsyncioStream
from proxy.upstream.pool import Transport, pooled_transport

RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
pytestmark = pytest.mark.anyio


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await reader.readuntil(b"\r\n\r\n"):  # keep-alive: one answer per request head
        writer.write(RESPONSE)
        await writer.drain()


class Server:
    """A loopback server running `handler` on each connection; `accepted`: their writers."""

    def __init__(self, handler: Handler = keep_alive) -> None:
        self.handler = handler
        self.accepted: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Server:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted.append(writer)
            try:
                await self.handler(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass  # closed
            finally:
                writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for writer in self.accepted:
            writer.close()


async def get(transport: httpx2.AsyncBaseTransport, url: str, **extensions: object) -> httpx2.Response:
    response = await transport.handle_async_request(httpx2.Request("GET", url, extensions=extensions))
    await response.aread()
    return response


async def test_its_connections_are_ours():
    async with Server() as server:
        transport = pooled_transport(ServerSettings(upstream=server.url))
        try:
            assert isinstance(transport, Transport) and isinstance(transport.pool, httpcore2.AsyncConnectionPool)
            response = await get(transport, server.url)
            assert response.content == b"ok" and isinstance(response, httpx2.Response)
            # httpcore2's public response extension: the stream the connection reads and writes
            assert isinstance(response.extensions["network_stream"], AsyncioStream)
        finally:
            await transport.aclose()


async def test_a_connection_closed_by_the_server_while_idle_is_replaced():
    async with Server() as server:
        transport = pooled_transport(ServerSettings(upstream=server.url))
        try:
            assert (await get(transport, server.url)).content == b"ok"
            assert (await get(transport, server.url)).content == b"ok"
            [connection] = transport.pool.connections
            assert len(server.accepted) == 1 and connection.is_idle() and not connection.has_expired()

            server.accepted[0].close()  # the server drops the idle keep-alive connection
            for _ in range(100):
                if connection.has_expired():
                    break
                await asyncio.sleep(0.01)
            assert connection.has_expired()
            assert (await get(transport, server.url)).content == b"ok" and len(server.accepted) == 2  # a new one
        finally:
            await transport.aclose()


async def test_without_keep_alive_no_connection_is_kept():
    async with Server() as server:
        transport = pooled_transport(ServerSettings(upstream=server.url), keep_alive=False)
        try:
            for _ in range(2):
                assert (await get(transport, server.url)).content == b"ok"
            assert transport.pool.connections == [] and len(server.accepted) == 2
        finally:
            await transport.aclose()


async def test_max_connections_bounds_the_pool():
    release = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.readuntil(b"\r\n\r\n"):
            await release.wait()
            writer.write(RESPONSE)
            await writer.drain()

    async with Server(slow) as server:
        transport = pooled_transport(ServerSettings(upstream=server.url, max_connections=1))
        try:
            first = asyncio.ensure_future(get(transport, server.url))
            await asyncio.sleep(0.05)
            with pytest.raises(httpx2.PoolTimeout):  # the one connection is busy: the second waits for it
                await get(transport, server.url, timeout={"pool": 0.1, "connect": 5, "read": 5, "write": 5})
            release.set()
            assert (await first).content == b"ok" and len(server.accepted) == 1
        finally:
            await transport.aclose()


async def test_httpcore2_errors_are_raised_as_httpx2s():
    async with Server() as server:
        port = server.server.sockets[0].getsockname()[1]
    transport = pooled_transport(ServerSettings(upstream=f"http://127.0.0.1:{port}/"))
    try:
        with pytest.raises(httpx2.ConnectError) as refused:  # nothing listens any more
            await get(transport, f"http://127.0.0.1:{port}/")
        assert isinstance(refused.value.__cause__, httpcore2.ConnectError)
    finally:
        await transport.aclose()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(10)

    async with Server(silent) as server:
        transport = pooled_transport(ServerSettings(upstream=server.url))
        try:
            with pytest.raises(httpx2.ReadTimeout):  # the most specific class: no bare TimeoutException
                await get(transport, server.url, timeout={"pool": 5, "connect": 5, "read": 0.1, "write": 5})
        finally:
            await transport.aclose()


async def test_an_error_reading_the_body_is_raised_as_httpx2s():
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()

    async with Server(cut) as server:
        transport = pooled_transport(ServerSettings(upstream=server.url))
        try:
            response = await transport.handle_async_request(httpx2.Request("GET", server.url))
            with pytest.raises(httpx2.RemoteProtocolError):
                await response.aread()
            await response.aclose()
        finally:
            await transport.aclose()


def test_every_httpcore2_error_has_its_httpx2_counterpart():
    """The map covers httpcore2's exception classes, each to httpx2's class of the same name (as
    httpx2's own transport maps them; ConnectionNotAvailable never leaves the pool: it retries)."""
    public = {
        value
        for name in dir(httpcore2)
        if isinstance(value := getattr(httpcore2, name), type) and issubclass(value, Exception)
    }
    assert public - {httpcore2.ConnectionNotAvailable} == set(pool_module.ERRORS)
    assert all(to.__name__ == source.__name__ for source, to in pool_module.ERRORS.items())
