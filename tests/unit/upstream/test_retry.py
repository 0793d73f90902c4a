"""A request the upstream closed its pooled connection on before answering goes again, once, on a
new connection (proxy.upstream.retry), against real loopback servers: one that closes a
keep-alive connection just as the next request arrives (with a FIN or a reset), one that sends a
few bytes of an answer first, one that never answers, and one that fails every request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from proxy.config import ServerSettings
from proxy.errors import ProxyError
from proxy.http.error_map import status_of
from proxy.upstream import retry
from proxy.upstream.client import Upstream
from proxy.upstream.network import Attempt
from tests.unit.upstream.test_network import Handler, Server

pytestmark = pytest.mark.anyio
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


def upstream_of(server: Server, **settings) -> Upstream:
    return Upstream(ServerSettings(upstream=f"http://127.0.0.1:{server.port}/v1", **settings))


BODY = b'{"model": "m", "input": "' + b"x" * 5000 + b'"}'
Content = bytes | AsyncIterator[bytes] | None
CONTENTS = {"no body": lambda: None, "bytes": lambda: BODY, "streamed": lambda: chunks(BODY)}


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
@pytest.mark.parametrize("method,content", [("GET", "no body"), ("POST", "bytes"), ("POST", "streamed")])
async def test_a_request_the_server_closed_its_pooled_connection_on_goes_again_once(reset, method, content):
    handler = ClosesIdle(reset=reset)
    async with Server(handler) as server:
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
    async with Server(handler) as server:
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
    async with Server(handler) as server:
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
    async with Server(handler) as server:
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
