"""One `response.create` through the very route `POST /v1/responses` takes: a request made in
process from the upgrade request's scope (its headers: credential, tenant, `X-Offload-*`) and the
event's body, sent through the whole application (caller gate, body limit, telemetry, the
managed turn, the reload loop), its answer read back: a 200 stream's events one by one, any other
answer as one `error` event with its status.

The client going away is the request's `http.disconnect`: the managed turn cancels the upstream
call as it does for an HTTP client that hangs up, and nothing is held. Once the answer is whole
(its last body part sent), the create is over for the socket: what the route does after it (an
observed turn's plan, the statistics, background summaries) goes on without holding the
connection's next create or being cancelled when the client closes, as after an HTTP answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.types import ASGIApp, Message, Scope

from proxy.core import jsonio
from proxy.core import jsonio as large_json
from proxy.upstream import sse

log = logging.getLogger("proxy.http.websocket")

# the upgrade's own headers, and those the body made here replaces
_DROPPED = frozenset(
    {
        b"connection",
        b"upgrade",
        b"content-length",
        b"content-type",
        b"content-encoding",
        b"transfer-encoding",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
        b"sec-websocket-accept",
    }
)
# OpenAI-Beta values that ask for the WebSocket mode itself (Codex's `responses_websockets=…`):
# they name the client's transport to the proxy, not the HTTP request the upstream gets
_TRANSPORT_BETA = b"responses_websockets"
MAX_ERROR_BODY = 64 * 1024  # of a non-200 answer, what the error event reads
QUEUED_CHUNKS = 64  # between the route and the socket: a slow client slows the stream, as over HTTP


def encoded(body: dict[str, Any], large: bool) -> bytes:
    """The body as the JSON bytes of an HTTP request (`proxy.core.jsonio`: UTF-8, a lone
    surrogate as its escape, which the route then reads as it would the client's own). `large`:
    written a piece at a time (`large_json`), to be called off the event loop."""
    return large_json.dumps_yielding(body) if large else jsonio.dumps(body)


def _without_transport_beta(value: bytes) -> bytes:
    return b",".join(
        part for part in value.split(b",") if part.strip() and not part.strip().lower().startswith(_TRANSPORT_BETA)
    )


def request_scope(upgrade: Scope, content_length: int) -> Scope:
    """The HTTP scope of `POST /v1/responses` made from the upgrade's: without the upgrade's own
    headers, nor the beta that asked for the WebSocket mode."""
    headers = []
    for key, value in upgrade["headers"]:
        name = key.lower()
        if name == b"openai-beta":
            value = _without_transport_beta(value)
            if not value:
                continue
        if name not in _DROPPED:
            headers.append((key, value))
    headers += [(b"content-type", b"application/json"), (b"content-length", str(content_length).encode())]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https" if upgrade.get("scheme") == "wss" else "http",
        "path": "/v1/responses",
        "raw_path": b"/v1/responses",
        "root_path": upgrade.get("root_path", ""),
        "query_string": upgrade.get("query_string", b""),
        "headers": headers,
        "client": upgrade.get("client"),
        "server": upgrade.get("server"),
        "state": {},
        "extensions": {},
        "offload.transport": "websocket",
    }


class Answer:
    """The route's answer to one request: its status, then (200) its events' JSON texts."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.started = asyncio.Event()
        self.ended = asyncio.Event()  # its last body part was sent: what the route does after it is its own
        self._chunks: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUED_CHUNKS)
        self._error_body = bytearray()

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.started.set()
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            if self.status == 200:
                if body:
                    await self._chunks.put(body)
            elif len(self._error_body) < MAX_ERROR_BODY:
                self._error_body += body[: MAX_ERROR_BODY - len(self._error_body)]
            if not message.get("more_body", False):
                await self.finish()

    async def finish(self) -> None:
        self.started.set()
        if not self.ended.is_set():
            self.ended.set()
            await self._chunks.put(None)

    @property
    def error_body(self) -> bytes:
        return bytes(self._error_body)

    async def _bytes(self) -> AsyncIterator[bytes]:
        while (chunk := await self._chunks.get()) is not None:
            yield chunk

    def events(self) -> AsyncIterator[str]:
        return sse.iter_data(self._bytes())


async def dispatch(
    app: ASGIApp, upgrade: Scope, content: bytes, *, gone: asyncio.Event, on_event: Callable[[str], Awaitable[None]]
) -> tuple[int, bytes]:
    """Run the request whose body is `content` (`encoded`); each event of a 200 stream goes to
    `on_event` (its JSON text) as it comes. Returns the status and, when it is not 200, the
    answer's body. `gone`: set when the client has gone away (the request then sees
    `http.disconnect`)."""
    scope = request_scope(upgrade, len(content))
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": content, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    answer = Answer()

    async def send(message: Message) -> None:
        if gone.is_set():  # as an HTTP server after a disconnect: dropped, the route is not failed
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await answer.finish()  # (the client read the last event and left before the end)
            return
        await answer.send(message)

    async def run() -> None:
        try:
            await app(scope, receive, send)
        finally:
            await answer.finish()

    task = asyncio.create_task(run())
    try:
        await answer.started.wait()
        if answer.status == 200:
            async for data in answer.events():
                if data != sse.DONE:
                    await on_event(data)
        else:
            await answer.ended.wait()  # (set when the route returns, at the latest)
    finally:
        if task.done():
            _retrieved(task)
        elif answer.ended.is_set():  # the answer is whole: what follows it in the route (an observed
            _AFTER.add(task)  # turn's plan, the statistics, summaries) goes on, as after an HTTP answer
            task.add_done_callback(_retrieved)
        else:  # the client went away mid-answer: the turn stops
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return answer.status or 500, answer.error_body


_AFTER: set[asyncio.Task[None]] = set()  # routes whose answers are whole, running what follows them


def _retrieved(task: asyncio.Task[None]) -> None:
    """A route that has returned: its failure logged as an HTTP server logs one (never asyncio's
    "exception was never retrieved")."""
    _AFTER.discard(task)
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("a response.create's route failed", exc_info=error)
