"""The transport to the upstream: the connection pool, when a request is sent again, and how the
upstream's failures become the proxy's own errors.

The pool: httpcore2's, its connections on asyncio directly. httpx2's `AsyncHTTPTransport` builds
its httpcore2 pool itself and takes no network backend, so the pool is built here, with
`network_backend=` (httpcore2's public argument), and `Transport` is the few lines of
`AsyncHTTPTransport` that carry an httpx2 request over it: the request and response models
translated, httpcore2's exceptions raised as httpx2's. Everything else `AsyncHTTPTransport` would
give the pool is kept as it gave it: the system's CAs, or SSL_CERT_FILE / SSL_CERT_DIR from the
environment (`httpx2.create_ssl_context`, trust_env), HTTP/1.1 only, no connect retries. The
client sends on the transport itself, never through an `httpx2.AsyncClient`, so no HTTP(S)_PROXY
from the environment was ever mounted: none is here. Timeouts travel with each request (its
`timeout` extension, `proxy.upstream.client`).

The retry: once, on a new connection, when the pooled connection a request went on was closed by
the server before a byte of answer came back. A server may close an idle keep-alive connection at
any moment, without having said so (uvicorn closes one about 2 ms after answering for an
application that raised, with no `Connection: close`): a request written into it just then fails
with a ReadError, a WriteError or "Server disconnected without sending a response". That server
never read the request (RFC 9112 §9.3.1, an asynchronous close), so it is sent again whatever its
method, as browsers and HTTP clients do in exactly this case. The caveat of HTTP's idempotency
rules stands: a server that read a POST and then died without a byte of answer, on a reused
connection, gets it twice. Never after a byte of answer (the request may have been processed),
never after a timeout, never when a new connection failed (a server that really fails gets one
attempt: one 502), never twice. A streamed body goes again from its start while what the first
attempt took of it is at most REPLAY_LIMIT bytes (kept until then); past that it is not retried.

The errors: one table (`UPSTREAM_ERRORS`), used for a request that fails before its answer, for
a body that breaks off, and for a stream cut midway. Each names the upstream's host (and port),
so a client knows which upstream failed: never its path, query or userinfo, where a credential
could be.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import httpcore2
import httpx2

from proxy.errors import Kind, ProxyError, error_body
from proxy.upstream.network import AsyncioBackend, Attempt

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


RETRIED = (httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError)  # no TimeoutException among them
REPLAY_LIMIT = 1 << 20


def may_retry(exc: Exception, attempt: Attempt) -> bool:
    """Did `exc` end a request written into a reused connection before any answer came back?"""
    return isinstance(exc, RETRIED) and attempt.reused is True and attempt.received == 0


class Replayable:
    """A streamed request body that can be sent again from its start (`again`) after a first
    attempt (`first`) took at most REPLAY_LIMIT bytes of it."""

    def __init__(self, chunks: AsyncIterable[bytes]) -> None:
        self._source = chunks.__aiter__()
        self._taken: list[bytes] | None = []  # None: more than REPLAY_LIMIT was taken
        self._size = 0

    @property
    def replayable(self) -> bool:
        return self._taken is not None

    def forget(self) -> None:
        """The answer came: nothing will go again, and what was kept is let go."""
        self._taken = None

    async def first(self) -> AsyncGenerator[bytes, None]:
        async for chunk in self._source:
            if self._taken is not None:
                self._size += len(chunk)
                if self._size > REPLAY_LIMIT:
                    self._taken = None
                else:
                    self._taken.append(chunk)
            yield chunk

    async def again(self) -> AsyncGenerator[bytes, None]:
        """What the first attempt took, then the rest of the body (the first attempt's iteration
        left off mid-way: the source itself is not closed by it)."""
        if self._taken is None:
            raise RuntimeError("the body is past REPLAY_LIMIT: it cannot be sent again")
        for chunk in self._taken:
            yield chunk
        async for chunk in self._source:
            yield chunk


class UpstreamError(ProxyError):
    """The upstream failed the proxy: unreachable, timed out, or an answer it cannot read."""


# The most specific first: the first row whose exception type matches decides.
UPSTREAM_ERRORS: tuple[tuple[type[Exception], Kind, str, str], ...] = (
    (httpx2.TimeoutException, Kind.UPSTREAM_TIMEOUT, "upstream_timeout", "Upstream timed out"),
    (httpx2.TransportError, Kind.UPSTREAM_FAILED, "upstream_unreachable", "Upstream unreachable"),
    (httpx2.HTTPError, Kind.UPSTREAM_FAILED, "upstream_error", "Upstream failed"),
)


def _row(exc: Exception) -> tuple[Kind, str, str]:
    for type_, kind, code, text in UPSTREAM_ERRORS:
        if isinstance(exc, type_):
            return kind, code, text
    return Kind.UPSTREAM_FAILED, "upstream_error", "Upstream failed"


def host_of(url: httpx2.URL) -> str:
    """`host`, or `host:port` for a port that is not its scheme's default."""
    return f"{url.host}:{url.port}" if url.port else url.host


def response_host(response: httpx2.Response) -> str | None:
    """The host an upstream response came from (`proxy.upstream.client.Upstream.send` sets its request)."""
    try:
        return host_of(response.request.url)
    except RuntimeError:  # a response made without a request (tests, fakes)
        return None


def _at(host: str | None) -> str:
    return f" at {host}" if host else ""


def upstream_error(exc: Exception, host: str | None = None) -> UpstreamError:
    """The error a client gets for an upstream request that failed before its answer."""
    kind, code, text = _row(exc)
    return UpstreamError(kind, f"{text}{_at(host)} ({type(exc).__name__}).", code=code)


def stream_broke(exc: Exception, host: str | None = None) -> dict[str, Any]:
    """The SSE error event sent when an upstream stream breaks off or times out midway."""
    _, code, _ = _row(exc)
    kind = "upstream_timeout" if code == "upstream_timeout" else "upstream_error"
    return error_body(f"The upstream stream{_at(host)} broke off ({type(exc).__name__}).", "server_error", kind)
