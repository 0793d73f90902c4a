"""The connection pool to the upstream: httpcore2's, its connections on asyncio directly.

httpx2's `AsyncHTTPTransport` builds its httpcore2 pool itself and takes no network backend, so
the pool is built here, with `network_backend=` (httpcore2's public argument), and `Transport`
is the few lines of `AsyncHTTPTransport` that carry an httpx2 request over it: the request and
response models translated, httpcore2's exceptions raised as httpx2's. Everything else
`AsyncHTTPTransport` would give the pool is kept as it gave it: the system's CAs, or
SSL_CERT_FILE / SSL_CERT_DIR from the environment (`httpx2.create_ssl_context`, trust_env), HTTP/1.1
only, no connect retries. The client sends on the transport itself, never through an
`httpx2.AsyncClient`, so no HTTP(S)_PROXY from the environment was ever mounted: none is here.
Timeouts travel with each request (its `timeout` extension, `proxy.upstream.client`).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Protocol

import httpcore2
import httpx2

from proxy.upstream.network import AsyncioBackend

# httpcore2's exceptions as httpx2 raises them (what `httpx2.AsyncHTTPTransport` maps); the most
# specific class of an exception's MRO that is listed wins (a ReadTimeout is no bare TimeoutException).
ERRORS: dict[type[Exception], type[httpx2.TransportError]] = {
    httpcore2.TimeoutException: httpx2.TimeoutException,
    httpcore2.ConnectTimeout: httpx2.ConnectTimeout,
    httpcore2.ReadTimeout: httpx2.ReadTimeout,
    httpcore2.WriteTimeout: httpx2.WriteTimeout,
    httpcore2.PoolTimeout: httpx2.PoolTimeout,
    httpcore2.NetworkError: httpx2.NetworkError,
    httpcore2.ConnectError: httpx2.ConnectError,
    httpcore2.ReadError: httpx2.ReadError,
    httpcore2.WriteError: httpx2.WriteError,
    httpcore2.ProxyError: httpx2.ProxyError,
    httpcore2.UnsupportedProtocol: httpx2.UnsupportedProtocol,
    httpcore2.ProtocolError: httpx2.ProtocolError,
    httpcore2.LocalProtocolError: httpx2.LocalProtocolError,
    httpcore2.RemoteProtocolError: httpx2.RemoteProtocolError,
}


class PoolSettings(Protocol):
    """What the pool reads of the server's settings (`proxy.config.ServerSettings` has it)."""

    @property
    def max_connections(self) -> int: ...


@contextmanager
def _as_httpx2() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        mapped = next((ERRORS[cls] for cls in type(exc).__mro__ if cls in ERRORS), None)
        if mapped is None:
            raise
        raise mapped(str(exc)) from exc


class _Body(httpx2.AsyncByteStream):
    """A response's body as httpcore2 streams it, its errors raised as httpx2's."""

    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx2():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()


class Transport(httpx2.AsyncBaseTransport):
    """httpx2 requests over an httpcore2 pool this module built (`pool`, httpcore2's public object)."""

    def __init__(self, pool: httpcore2.AsyncConnectionPool) -> None:
        self.pool = pool

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        assert isinstance(request.stream, httpx2.AsyncByteStream)
        url = request.url
        sent = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx2():
            answer = await self.pool.handle_async_request(sent)
        assert isinstance(answer.stream, AsyncIterable)
        return httpx2.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(answer.stream),
            extensions=answer.extensions,
        )

    async def aclose(self) -> None:
        await self.pool.aclose()


def pooled_transport(settings: PoolSettings, *, keep_alive: bool = True) -> Transport:
    """Keep-alive connections, reused; `keep_alive=False`: none is kept, every request opens its
    own (what a request retried after a pooled connection failed goes on)."""
    pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(verify=True, cert=None, trust_env=True),
        max_connections=settings.max_connections,
        max_keepalive_connections=min(settings.max_connections, 200) if keep_alive else 0,
        keepalive_expiry=60,
        http1=True,
        http2=False,
        retries=0,
        network_backend=AsyncioBackend(),
    )
    return Transport(pool)
