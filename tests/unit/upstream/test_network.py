"""The upstream sockets on asyncio (proxy/upstream/network.py), against real loopback servers."""

from __future__ import annotations

import asyncio
import pathlib
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import httpcore2
import httpx2
import pytest
import trustme

from proxy.config import ServerSettings
from proxy.errors import ProxyError
from proxy.http.error_map import status_of
from proxy.upstream import network
from proxy.upstream.client import Upstream
from proxy.upstream.network import AsyncioBackend
from proxy.upstream.transport import pooled_transport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
pytestmark = pytest.mark.anyio


class Server:
    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler, self.ssl_context = handler, ssl_context
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Server:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.writers.append(writer)
            try:
                await self.handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=self.ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for writer in self.writers:
            writer.close()


async def connect(server: Server) -> httpcore2.AsyncNetworkStream:
    return await AsyncioBackend().connect_tcp("127.0.0.1", server.port, timeout=5)


async def echo_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request head with what it received (the head and up to 64 KiB after it)."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:-2]).get(b"content-length", 0))
        body = await reader.readexactly(length)
        answer = head + body
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer))
        await writer.drain()


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accepts, then neither reads nor answers."""
    await asyncio.sleep(30)


async def test_writes_made_without_yielding_leave_together_and_a_pause_sends_what_is_held():
    received: list[bytes] = []
    arrived = asyncio.Event()

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            received.append(chunk)
            arrived.set()
            writer.write(b"ok")

    async with Server(record) as server:
        stream = await connect(server)
        await stream.write(b"POST / HTTP/1.1\r\n\r\n")
        await stream.write(b"body")
        assert await stream.read(100, timeout=5) == b"ok"
        assert received == [b"POST / HTTP/1.1\r\n\r\nbody"]  # one segment

        received.clear()
        arrived.clear()
        await stream.write(b"piece 1")  # then the writer waits for something else: the piece leaves
        await asyncio.wait_for(arrived.wait(), 5)
        assert received == [b"piece 1"]
        await stream.aclose()


async def test_a_large_write_leaves_at_once_and_waits_for_the_socket_to_drain():
    total = 0
    done = asyncio.Event()

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal total
        while chunk := await reader.read(65536):
            total += len(chunk)
            if total >= 8 * 2**20:
                done.set()

    async with Server(count) as server:
        stream = await connect(server)
        for _ in range(128):
            await stream.write(b"x" * 65536)  # 8 MiB: far more than the kernel buffers hold
        await asyncio.wait_for(done.wait(), 10)
        assert total == 8 * 2**20
        await stream.aclose()


async def test_a_write_to_a_reader_that_never_reads_times_out():
    async with Server(silent) as server:
        stream = await connect(server)
        with pytest.raises(httpcore2.WriteTimeout):
            for _ in range(4096):  # up to 256 MiB; the socket buffers fill long before
                await stream.write(b"x" * 65536, timeout=0.2)
        await stream.aclose()


async def test_a_read_times_out_when_nothing_arrives():
    async with Server(silent) as server:
        stream = await connect(server)
        with pytest.raises(httpcore2.ReadTimeout):
            await stream.read(100, timeout=0.1)
        await stream.aclose()


async def test_end_of_stream_reads_empty_and_a_reset_is_a_read_error():
    async def close_now(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"last")
        await writer.drain()

    async with Server(close_now) as server:
        stream = await connect(server)
        assert await stream.read(100, timeout=5) == b"last"
        assert await stream.read(100, timeout=5) == b""
        assert stream.get_extra_info("is_readable")  # EOF waiting: not reusable
        await stream.aclose()

    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # linger 0: a reset, not an orderly close

    async with Server(reset) as server:
        stream = await connect(server)
        await stream.write(b"x")
        with pytest.raises(httpcore2.ReadError):
            await stream.read(100, timeout=5)
        with pytest.raises(httpcore2.WriteError):
            await stream.write(b"more")


async def test_a_fast_sender_is_paused_while_its_data_waits_unread():
    size = 4 * 2**20

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(bytes(range(256)) * (size // 256))
        await writer.drain()

    async with Server(flood) as server:
        stream = await connect(server)
        await asyncio.sleep(0.3)  # the server writes as fast as it can; the proxy does not read yet
        held = len(stream._connection.buffer)
        assert 0 < held <= network.READ_HIGH_WATER + 2**20  # paused near the mark, not 4 MiB in memory
        data = bytearray()
        while chunk := await stream.read(65536, timeout=5):
            data += chunk
        assert data == bytes(range(256)) * (size // 256)  # nothing lost or reordered across the pauses
        await stream.aclose()


async def test_connect_errors_are_httpcore_errors():
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(httpcore2.ConnectError):
        await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)  # nothing listens: refused

    with socket.socket() as full:  # a listener that never accepts: once its queue is full, SYNs go unanswered
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        opened = []
        with pytest.raises(httpcore2.ConnectTimeout):
            for _ in range(16):
                opened.append(await AsyncioBackend().connect_tcp("127.0.0.1", full.getsockname()[1], timeout=0.2))
        for stream in opened:
            await stream.aclose()


async def test_requests_through_the_pool_reuse_one_connection_and_carry_bodies_whole():
    async with Server(echo_head) as server:
        upstream = Upstream(ServerSettings(upstream=f"http://127.0.0.1:{server.port}/v1"))
        try:
            for size in (0, 10, 200_000):  # the last one past WRITE_BATCH
                body = b"b" * size
                response = await upstream.send("POST", "chat/completions", headers=[(b"host", b"x")], content=body)
                echoed = await response.aread()
                assert echoed.endswith(b"\r\n\r\n" + body) and b"POST /v1/chat/completions" in echoed
            assert len(server.writers) == 1  # kept alive and reused
        finally:
            await upstream.aclose()


async def test_a_closed_upstream_port_is_a_502_and_silence_a_504():
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    upstream = Upstream(ServerSettings(upstream=f"http://127.0.0.1:{port}/v1"))
    with pytest.raises(ProxyError) as info:
        await upstream.send("POST", "chat/completions", headers=[], content=b"{}")
    assert status_of(info.value) == 502
    await upstream.aclose()

    async with Server(silent) as server:
        upstream = Upstream(ServerSettings(upstream=f"http://127.0.0.1:{server.port}/v1", read_timeout=0.2))
        with pytest.raises(ProxyError) as info:
            await upstream.send("POST", "chat/completions", headers=[], content=b"{}")
        assert status_of(info.value) == 504
        await upstream.aclose()


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


async def test_https_upstream_through_start_tls(
    authority: trustme.CA, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
):
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(served)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    async with Server(echo_head, ssl_context=served) as server:
        settings = ServerSettings(upstream=f"https://127.0.0.1:{server.port}/v1")
        authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # trusted as httpx2 trusts the environment's
        transport = pooled_transport(settings)
        try:
            url = f"https://127.0.0.1:{server.port}/v1/models"
            for _ in range(2):
                response = await transport.handle_async_request(httpx2.Request("GET", url))
                assert response.status_code == 200 and b"GET /v1/models" in await response.aread()
                stream = response.extensions["network_stream"]
                assert isinstance(stream, network.AsyncioStream) and stream.get_extra_info("ssl_object") is not None
            assert len(transport.pool.connections) == 1
        finally:
            await transport.aclose()

        monkeypatch.delenv("SSL_CERT_FILE")
        untrusted = pooled_transport(settings)  # the system's CAs: the test CA is not among them
        with pytest.raises(httpx2.ConnectError):
            await untrusted.handle_async_request(httpx2.Request("GET", f"https://127.0.0.1:{server.port}/"))
        await untrusted.aclose()


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), 1000):
        yield data[i : i + 1000]


async def test_a_streamed_request_body_arrives_whole():
    async with Server(echo_head) as server:
        upstream = Upstream(ServerSettings(upstream=f"http://127.0.0.1:{server.port}/v1"))
        body = bytes(range(256)) * 400
        response = await upstream.send(
            "POST", "files", headers=[(b"content-length", str(len(body)).encode())], content=_chunks(body)
        )
        assert (await response.aread()).endswith(body)
        await upstream.aclose()
