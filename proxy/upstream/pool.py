"""The connection pool to the upstream: httpx2's, with a cheaper check of its idle connections."""

from __future__ import annotations

import select
import socket
from typing import Any

import httpcore2
import httpx2

from proxy.config import ServerSettings


def _readable(sock: socket.socket | None) -> bool:
    """Data or EOF waiting on an idle connection's socket (or no socket left): do not reuse it."""
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class _ProbedStream(httpcore2.AsyncNetworkStream):
    """httpcore2's own stream, with a cheap answer to "did the server close this idle connection?".

    The pool asks that of every idle connection each time a request is queued or released; the
    anyio stream answers by rebuilding its whole table of socket attributes (a getpeername()
    included) before the same poll(): with 50 requests in flight, a quarter of the proxy's CPU.
    """

    def __init__(self, stream: httpcore2.AsyncNetworkStream) -> None:
        self._stream = stream
        self._socket = stream.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore2.AsyncNetworkStream:
        return _ProbedStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return _readable(self._socket)
        return self._stream.get_extra_info(info)


class _ProbedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's anyio backend, its connections wrapped in _ProbedStream."""

    def __init__(self) -> None:
        self._backend = httpcore2.AnyIOBackend()

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore2.AsyncNetworkStream:
        return _ProbedStream(await self._backend.connect_tcp(*args, **kwargs))

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore2.AsyncNetworkStream:
        return _ProbedStream(await self._backend.connect_unix_socket(*args, **kwargs))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def pooled_transport(settings: ServerSettings) -> httpx2.AsyncHTTPTransport:
    transport = httpx2.AsyncHTTPTransport(
        limits=httpx2.Limits(
            max_connections=settings.max_connections,
            max_keepalive_connections=min(settings.max_connections, 200),
            keepalive_expiry=60,
        ),
    )
    # httpx2 takes no network backend argument; its pool reads this one for every new connection.
    transport._pool._network_backend = _ProbedBackend()
    return transport
