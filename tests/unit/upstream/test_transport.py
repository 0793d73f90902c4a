"""The transport to the upstream (proxy.upstream.transport).

The connection pool: its connections are ours (AsyncioBackend's), installed through httpcore2's
public `network_backend=`; the pool keeps what httpx2's transport gave it; an idle connection the
server closed is seen as such, never reused.

The retry: a request the upstream closed its pooled connection on before answering goes again,
once, on a new connection, against real loopback servers: one that closes a keep-alive
connection just as the next request arrives (with a FIN or a reset), one that sends a few bytes
of an answer first, one that never answers, and one that fails every request.

The table mapping the upstream's failures to the proxy's errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpcore2
import httpx2
import pytest

from proxy.config import ServerSettings
from proxy.errors import ProxyError
from proxy.http.error_map import body_of, status_of
from proxy.upstream import transport as pool_module
from proxy.upstream import transport as retry
from proxy.upstream.client import Upstream
from proxy.upstream.network import AsyncioStream, Attempt
from proxy.upstream.transport import UPSTREAM_ERRORS, Transport, pooled_transport, stream_broke, upstream_error
from tests.unit.upstream.test_network import Server as NetworkServer

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
            second = await get(transport, server.url)
            [connection] = transport.pool.connections
            assert (
                second.content == b"ok"
                and len(server.accepted) == 1
                and connection.is_idle()
                and not connection.has_expired()
            )
            stream = second.extensions["network_stream"]  # httpcore2's public extension: the connection's
            assert isinstance(stream, AsyncioStream) and not stream.get_extra_info("is_readable")

            server.accepted[0].close()  # the server drops the idle keep-alive connection
            for _ in range(1000):  # the close reaches the socket when the loop gets to it (a busy machine: later)
                if stream.get_extra_info("is_readable"):
                    break
                await asyncio.sleep(0.01)
            # what httpcore2 asks of an idle connection before it writes a request into it (2.16:
            # `has_expired`, in the pool; 2.17: the connection itself, closing it): the close is seen
            assert stream.get_extra_info("is_readable")
            assert (await get(transport, server.url)).content == b"ok" and len(server.accepted) == 2  # a new one
            assert connection.is_closed() and transport.pool.connections != [connection]
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


ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request, its body read by Content-Length or chunk by chunk."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").lower().split("\r\n")
    length = next((int(line.split(":", 1)[1]) for line in lines if line.startswith("content-length:")), 0)
    if "transfer-encoding: chunked" not in lines:
        return head + await reader.readexactly(length)
    body = b""
    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
        body += (await reader.readexactly(size + 2))[:-2]
    await reader.readuntil(b"\r\n")
    return head + body


class ClosesIdle:
    """Answers the first request of each connection, keeping it alive (no `Connection: close`), and
    closes it as the next request arrives, unanswered: a server closing an idle keep-alive
    connection just when the proxy sends on it (uvicorn after an application's exception), the
    race lost every time. `then`: what it does on that next request instead of closing at once."""

    def __init__(self, *, reset: bool = False, then: bytes = b"", answer_new: bool = True) -> None:
        self.reset, self.then, self.answer_new = reset, then, answer_new
        self.connections = 0
        self.answered: list[bytes] = []
        self.unanswered = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.answer_new:
            self.answered.append(await read_request(reader))
            writer.write(ANSWER)
            await writer.drain()
        if not await reader.read(1):  # the next request's first bytes, or the client closed it
            return
        self.unanswered += 1
        if self.then:
            writer.write(self.then)
            await writer.drain()
        if self.reset:
            writer.transport.abort()  # unread bytes left: a reset, not an orderly close
        else:
            writer.close()


async def chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def upstream_of(server: NetworkServer, **settings) -> Upstream:
    return Upstream(ServerSettings(upstream=f"http://127.0.0.1:{server.port}/v1", **settings))


BODY = b'{"model": "m", "input": "' + b"x" * 5000 + b'"}'
Content = bytes | AsyncIterator[bytes] | None
CONTENTS = {"no body": lambda: None, "bytes": lambda: BODY, "streamed": lambda: chunks(BODY)}


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
@pytest.mark.parametrize("method,content", [("GET", "no body"), ("POST", "bytes"), ("POST", "streamed")])
async def test_a_request_the_server_closed_its_pooled_connection_on_goes_again_once(reset, method, content):
    handler = ClosesIdle(reset=reset)
    async with NetworkServer(handler) as server:
        upstream = upstream_of(server)
        try:
            for _ in range(4):
                length = [] if content == "no body" else [(b"content-length", str(len(BODY)).encode())]
                response = await upstream.send(method, "responses", headers=length, content=CONTENTS[content]())
                assert response.status_code == 200 and await response.aread() == b"{}"
        finally:
            await upstream.aclose()
    # 1 on a new connection A; 2 on A, closed unread, then on a new one B (kept by no pool); 3 on a new
    # one C; 4 on C, closed unread, then on D
    assert handler.connections == 4 and handler.unanswered == 2 and len(handler.answered) == 4
    for request in handler.answered:
        assert request.startswith(method.encode() + b" /v1/responses HTTP/1.1")
        assert request.endswith(b"\r\n\r\n" if content == "no body" else b"\r\n\r\n" + BODY)


async def test_a_streamed_body_goes_again_whole_after_the_first_attempt_took_part_of_it():
    handler = ClosesIdle(reset=True)
    body = bytes(range(256)) * 2000  # 512 KB in 1,000-byte chunks: taken while the connection is being reset
    async with NetworkServer(handler) as server:
        upstream = upstream_of(server)
        try:
            for _ in range(2):
                response = await upstream.send("POST", "files", headers=[], content=chunks(body))
                assert response.status_code == 200
                await response.aread()
        finally:
            await upstream.aclose()
    assert [request.partition(b"\r\n\r\n")[2] for request in handler.answered] == [body, body]
    assert all(b"transfer-encoding: chunked" in request.lower() for request in handler.answered)


async def second_fails(
    handler: Handler,
    *,
    second: Callable[[], Content] = lambda: BODY,
    between: Callable[[], None] = lambda: None,
    **settings: Any,
) -> ProxyError:
    """One request answered, then a second one (`between` them: a change of the server's mind),
    whose error is returned (it must fail)."""
    async with NetworkServer(handler) as server:
        upstream = upstream_of(server, **settings)
        try:
            await (await upstream.send("POST", "responses", headers=[], content=BODY)).aread()
            between()
            with pytest.raises(ProxyError) as info:
                await upstream.send("POST", "responses", headers=[], content=second())
        finally:
            await upstream.aclose()
    return info.value


async def test_after_a_byte_of_answer_nothing_goes_again():
    """The server may have processed the request: a 502, and the request was sent once."""
    for partial in (b"H", b"HTTP/1.1 200 OK\r\ncontent-le"):
        handler = ClosesIdle(then=partial)
        error = await second_fails(handler)
        assert status_of(error) == 502 and error.code == "upstream_unreachable"
        assert handler.connections == 1 and handler.unanswered == 1


async def test_a_server_that_really_fails_gets_one_attempt_per_request_and_one_502():
    """A new connection that fails is not retried; a pooled one is retried once, and no more."""
    handler = ClosesIdle(answer_new=False)  # answers nothing: closes every connection at the first request
    async with NetworkServer(handler) as server:
        upstream = upstream_of(server)
        try:
            for _ in range(3):
                with pytest.raises(ProxyError) as info:
                    await upstream.send("POST", "responses", headers=[], content=BODY)
                assert status_of(info.value) == 502
        finally:
            await upstream.aclose()
    assert handler.connections == handler.unanswered == 3

    answers_once = ClosesIdle()
    error = await second_fails(answers_once, between=lambda: setattr(answers_once, "answer_new", False))
    assert status_of(error) == 502
    assert answers_once.connections == 2 and answers_once.unanswered == 2  # the pooled one, then one new one


async def test_a_timeout_is_not_sent_again():
    seen: list[bytes] = []

    async def answers_once_then_silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(ANSWER)
        await writer.drain()
        seen.append(await read_request(reader))
        await asyncio.sleep(30)

    error = await second_fails(answers_once_then_silent, read_timeout=0.3)
    assert status_of(error) == 504 and len(seen) == 2  # one connection, the second request on it once


async def test_a_streamed_body_past_the_replay_limit_is_not_sent_again(monkeypatch):
    monkeypatch.setattr(retry, "REPLAY_LIMIT", 4096)
    handler = ClosesIdle()
    error = await second_fails(handler, second=lambda: chunks(b"b" * 50_000))
    assert status_of(error) == 502 and handler.connections == 1


def test_only_connection_failures_before_an_answer_on_a_reused_connection_are_retried():
    import httpx2

    pooled, new, answered = Attempt(reused=True), Attempt(reused=False), Attempt(reused=True, received=1)
    for error in (
        httpx2.ReadError("x"),
        httpx2.WriteError("x"),
        httpx2.RemoteProtocolError("Server disconnected without sending a response."),
    ):
        assert retry.may_retry(error, pooled)
        assert not retry.may_retry(error, new) and not retry.may_retry(error, answered)
        assert not retry.may_retry(error, Attempt())  # nothing was written
    for error in (
        httpx2.ReadTimeout("x"),
        httpx2.WriteTimeout("x"),
        httpx2.PoolTimeout("x"),
        httpx2.ConnectError("x"),
        httpx2.ConnectTimeout("x"),
    ):
        assert not retry.may_retry(error, pooled)


@pytest.mark.parametrize(
    "exc, status, code",
    [
        (httpx2.ConnectTimeout("x"), 504, "upstream_timeout"),
        (httpx2.ReadTimeout("x"), 504, "upstream_timeout"),
        (httpx2.PoolTimeout("x"), 504, "upstream_timeout"),
        (httpx2.ConnectError("x"), 502, "upstream_unreachable"),
        (httpx2.RemoteProtocolError("x"), 502, "upstream_unreachable"),
        (httpx2.ReadError("x"), 502, "upstream_unreachable"),
        (httpx2.DecodingError("x"), 502, "upstream_error"),
        (ValueError("x"), 502, "upstream_error"),
    ],
)
def test_each_failure_maps_to_one_status_and_code(exc, status, code):
    error = upstream_error(exc)
    assert (status_of(error), error.code, body_of(error)["error"]["type"]) == (status, code, "server_error")
    assert type(exc).__name__ in error.message
    event = stream_broke(exc)["error"]
    assert event["code"] == ("upstream_timeout" if code == "upstream_timeout" else "upstream_error")


def test_rows_go_from_specific_to_general():
    kinds = [kind for kind, *_ in UPSTREAM_ERRORS]
    for i, kind in enumerate(kinds):
        assert not any(issubclass(kind, earlier) for earlier in kinds[:i]), kind  # a row never shadowed


def test_the_upstream_is_named_by_host_and_port_only():
    from proxy.upstream.transport import host_of, response_host

    url = httpx2.URL("https://user:pw@api.example.com:8443/v1/chat?key=secret")
    assert (
        host_of(url) == "api.example.com:8443"
        and host_of(httpx2.URL("https://api.example.com/v1")) == "api.example.com"
    )
    error = upstream_error(httpx2.ConnectError("x"), host_of(url))
    assert error.message == "Upstream unreachable at api.example.com:8443 (ConnectError)."
    assert (
        stream_broke(httpx2.ReadTimeout("x"), "h:1")["error"]["message"]
        == "The upstream stream at h:1 broke off (ReadTimeout)."
    )
    response = httpx2.Response(200)
    assert response_host(response) is None
    response.request = httpx2.Request("GET", url)
    assert response_host(response) == "api.example.com:8443"
