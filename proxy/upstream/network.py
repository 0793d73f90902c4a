"""The sockets under httpx2's connection pool, on asyncio itself instead of anyio.

httpcore2's anyio streams pay, on every read and every write, for a cancel scope (`fail_after`,
which asks sniffio and the current task), a resource guard and an extra trip through the event
loop (`checkpoint`); its idle-connection check rebuilds anyio's table of socket attributes (a
getpeername() included) before a poll(). On the proxy's hot path (one request up, the first
chunk back) that was about a third of the upstream hop. Here a connection is an asyncio
`Protocol` with its own buffer: a read returns what is buffered without waiting, a write goes to
the transport, a timeout is one timer, and "did the server close this idle connection?" is a
look at the buffer. The proxy only ever runs on asyncio (uvloop when installed).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpcore2

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]

# Stop reading from the socket while this much is buffered and unread (the pool reads 64 KiB at a time).
READ_HIGH_WATER = 256 * 1024
# Writes made without yielding to the event loop leave together (see AsyncioStream.write), or as
# soon as this much is held.
WRITE_BATCH = 64 * 1024
WRITE_SLICE = 1024 * 1024  # a larger write is handed to the transport in pieces of this size


@dataclass
class Attempt:
    """What the sockets saw of one attempt of a request `proxy.upstream.client.Upstream.send`
    makes, while it is sent and its answer's head awaited: whether the connection had carried an
    answer before (a pooled one), and how many bytes came back for this request. A connection the
    server closed before reading the request fails with nothing received: that request can go again."""

    reused: bool | None = None  # None: nothing was written yet
    received: int = 0


# The attempt the sockets report to. httpcore2 hands a network stream no handle on the request
# it carries (its reads and writes get bytes and a timeout), so the one channel from a request
# to the socket under it is the context; `watching` alone sets it, around one transport call
# (`tests/project/test_context_vars.py` allows this one variable below the HTTP layer, and
# nothing else).
ATTEMPT: ContextVar[Attempt | None] = ContextVar("upstream_attempt", default=None)


@contextmanager
def watching(attempt: Attempt) -> Iterator[None]:
    """The sockets report what they see to `attempt` while the block runs."""
    token = ATTEMPT.set(attempt)
    try:
        yield
    finally:
        ATTEMPT.reset(token)


class _Connection(asyncio.Protocol):
    """One socket's events, turned into a buffer the stream reads and a few flags."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.lost = False
        self.reading_paused = False
        self.read_waiter: asyncio.Future[None] | None = None
        self.write_paused = False
        self.drain_waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > READ_HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost, self.eof = True, True
        self.error = exc
        self._wake_reader()
        self.write_paused = False
        waiter, self.drain_waiter = self.drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        waiter, self.drain_waiter = self.drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_reader(self) -> None:
        waiter, self.read_waiter = self.read_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


async def _wait(future: asyncio.Future[None], timeout: float | None, error: type[Exception]) -> None:
    """Wait for `future`, raising `error` after `timeout` seconds (None: no limit)."""
    if timeout is None:
        await future
        return
    timer = asyncio.get_running_loop().call_later(timeout, _expire, future, error)
    try:
        await future
    finally:
        timer.cancel()


def _expire(future: asyncio.Future[None], error: type[Exception]) -> None:
    if not future.done():
        future.set_exception(error("timed out"))


class AsyncioStream(httpcore2.AsyncNetworkStream):
    """A connection to the upstream, as httpcore2 reads and writes it."""

    def __init__(self, transport: asyncio.Transport, connection: _Connection) -> None:
        self._transport = transport
        self._connection = connection
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._answered = False  # bytes came back on it: a later request goes on a reused connection

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        connection = self._connection
        self._send_held()
        if not connection.buffer and not connection.eof:
            if connection.read_waiter is not None:
                raise httpcore2.ReadError("a read is already waiting on this connection")
            connection.read_waiter = asyncio.get_running_loop().create_future()
            try:
                await _wait(connection.read_waiter, timeout, httpcore2.ReadTimeout)
            finally:
                connection.read_waiter = None
        if connection.buffer:
            data = bytes(connection.buffer[:max_bytes])
            del connection.buffer[:max_bytes]
            self._answered = True
            if (attempt := ATTEMPT.get()) is not None:
                attempt.received += len(data)
            if connection.reading_paused and len(connection.buffer) <= READ_HIGH_WATER // 4 and not connection.lost:
                connection.reading_paused = False
                self._transport.resume_reading()
            return data
        if connection.error is not None:
            raise httpcore2.ReadError(str(connection.error) or type(connection.error).__name__)
        return b""  # the server closed the connection

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Held until the stream reads, the caller yields to the event loop, or WRITE_BATCH is held.

        httpcore2 writes a request's head, its body and reads the answer without yielding in
        between: the three leave as one segment. A body streamed in pieces (a relayed upload)
        still leaves piece by piece, as each one is written."""
        if not buffer:
            return
        if (attempt := ATTEMPT.get()) is not None and attempt.reused is None:  # the request's first write
            attempt.reused = self._answered
        connection = self._connection
        if connection.write_paused:  # the kernel's buffer is full: wait until it drains
            await self._drained(timeout)
        if connection.lost or self._transport.is_closing():
            raise httpcore2.WriteError(str(connection.error or "the connection is closed"))
        if len(buffer) > WRITE_SLICE:  # tens of MB: handed over a slice at a time, the loop free between
            await self._write_large(buffer, timeout)
            return
        self._held.append(buffer)
        self._held_bytes += len(buffer)
        if self._held_bytes >= WRITE_BATCH:
            self._send_held()
            if connection.write_paused:
                await self._drained(timeout)
        elif len(self._held) == 1:
            asyncio.get_running_loop().call_soon(self._send_held)

    async def _write_large(self, buffer: bytes, timeout: float | None) -> None:
        """What is held, then `buffer` in WRITE_SLICE pieces, each once the kernel has taken the
        last: one transport.write of 50 MB copies it whole on the event loop."""
        self._send_held()
        view = memoryview(buffer)
        for start in range(0, len(view), WRITE_SLICE):
            connection = self._connection
            if connection.write_paused:
                await self._drained(timeout)
            if connection.lost or self._transport.is_closing():
                raise httpcore2.WriteError(str(connection.error or "the connection is closed"))
            self._transport.write(view[start : start + WRITE_SLICE])
        if self._connection.write_paused:
            await self._drained(timeout)

    def _send_held(self) -> None:
        if not self._held:
            return
        held = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held, self._held_bytes = [], 0
        if not self._transport.is_closing():  # else the next read reports the lost connection
            self._transport.write(held)

    async def _drained(self, timeout: float | None) -> None:
        connection = self._connection
        connection.drain_waiter = asyncio.get_running_loop().create_future()
        await _wait(connection.drain_waiter, timeout, httpcore2.WriteTimeout)
        if connection.lost:
            raise httpcore2.WriteError(str(connection.error or "the connection is closed"))

    async def aclose(self) -> None:
        self._held, self._held_bytes = [], 0
        self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            transport = await loop.start_tls(
                self._transport,
                self._connection,
                ssl_context,
                server_hostname=server_hostname,
                ssl_handshake_timeout=timeout,
            )
        except (TimeoutError, asyncio.TimeoutError) as exc:
            self._transport.close()
            raise httpcore2.ConnectTimeout(str(exc) or "TLS handshake timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore2.ConnectError(str(exc)) from exc
        if transport is None:
            raise httpcore2.ConnectError("the connection closed during the TLS handshake")
        # start_tls does not call connection_made again: reading is paused and resumed on the
        # TLS transport from now on (pausing the raw one would never be undone)
        self._connection.transport = transport
        return AsyncioStream(transport, self._connection)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle connection with data or EOF waiting must not be reused
            connection = self._connection
            return bool(connection.buffer) or connection.eof or self._transport.is_closing()
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        return None


class AsyncioBackend(httpcore2.AsyncNetworkBackend):
    """Opens AsyncioStream connections."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        stream = await self._connect(loop.create_connection(_Connection, host, port, local_addr=local), timeout)
        sock = stream.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small writes leave at once
        self._apply(stream, socket_options)
        return stream

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        stream = await self._connect(loop.create_unix_connection(_Connection, path), timeout)
        self._apply(stream, socket_options)
        return stream

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    @staticmethod
    async def _connect(opening: Any, timeout: float | None) -> AsyncioStream:
        try:
            async with asyncio.timeout(timeout):
                transport, connection = await opening
        except TimeoutError as exc:
            raise httpcore2.ConnectTimeout(str(exc) or "connection timed out") from exc
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        return AsyncioStream(transport, connection)

    @staticmethod
    def _apply(stream: AsyncioStream, options: Iterable[SocketOption] | None) -> None:
        sock = stream.get_extra_info("socket")
        for option in options or ():
            sock.setsockopt(*option)
