"""One `response.create` answered as `POST /v1/responses` answers its body, without HTTP: no
request is made in process, nothing goes through the application. The steps the POST meets are
called directly, in its order: its record (`proxy.http.telemetry.Recording`: the metrics, the
access log, the statistics, as a request of transport `websocket`), the body limit (413), the
admin token refused (403), the caller gate (`proxy.http.caller.Gatekeeper`: 401/403/400, the
upgrade's credential checked again for each create), the unknown `X-Offload-*` headers counted,
then the managed route itself (`proxy.http.managed.respond`: read and parse the body, the
`X-Offload-*` settings, the observe / holdout / managed turn, the proxy's errors in the Responses
shape). The client's headers are the upgrade's (`Upgrade`: without the upgrade's own, nor the
beta that asked for the WebSocket mode), read once per connection; the body is the event's.
Its answer goes back as events: a 200 stream's one by one, any other answer as one `error` event
with its status.

The client going away (`gone`) is what a hang-up is to an HTTP request: the managed turn cancels
the upstream call (`proxy.http.disconnect.ClientWatch.until`), a stream stops, nothing is held.
Once the answer is whole (its last part written), the create is over for the socket: what the
route does after it (the response's background: an observed turn's plan, the statistics,
background summaries) goes on without holding the connection's next create or being cancelled
when the client closes, as after an HTTP answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from starlette.datastructures import Headers
from starlette.responses import Response, StreamingResponse
from starlette.types import Scope

from proxy.core import jsonio
from proxy.core import jsonio as large_json
from proxy.errors import ProxyError
from proxy.formats.responses import RESPONSES
from proxy.http.call_parts import Services
from proxy.http.caller import Gatekeeper
from proxy.http.disconnect import ClientDisconnected, ClientWatch
from proxy.http.error_map import error_response, response_of
from proxy.http.headers import unknown_in
from proxy.http.managed import ManagedCall, respond
from proxy.http.stats_api import not_a_credential, presents_admin_token
from proxy.http.telemetry import Recording, RequestRecord, noted
from proxy.upstream import sse

log = logging.getLogger("proxy.http.websocket")

PATH = "/v1/responses"  # what a create stands for: its record's route, its statistics' path
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


def client_headers(upgrade: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The client's headers of every create: the upgrade's, without its own headers, nor the
    beta that asked for the WebSocket mode."""
    headers = []
    for key, value in upgrade:
        name = key.lower()
        if name == b"openai-beta":
            value = _without_transport_beta(value)
            if not value:
                continue
        if name not in _DROPPED:
            headers.append((key, value))
    return headers


def body_headers(headers: list[tuple[bytes, bytes]], content_length: int) -> list[tuple[bytes, bytes]]:
    """`headers` with those of a create's body (JSON, its length), as the POST's."""
    return [*headers, (b"content-type", b"application/json"), (b"content-length", str(content_length).encode())]


@dataclass(frozen=True)
class Upgrade:
    """What every create of one connection takes from its upgrade, read once: the server's
    services, the caller gate, the recording, the client's headers and query."""

    services: Services
    gatekeeper: Gatekeeper
    recording: Recording
    headers: list[tuple[bytes, bytes]]
    query: bytes

    @classmethod
    def of(cls, scope: Scope, *, gatekeeper: Gatekeeper, recording: Recording) -> Upgrade:
        return cls(
            services=cast(Services, scope["app"].state.services),
            gatekeeper=gatekeeper,
            recording=recording,
            headers=client_headers(scope["headers"]),
            query=scope.get("query_string", b""),
        )


async def answer_to(
    upgrade: Upgrade, content: bytes, *, gone: asyncio.Event, rec: RequestRecord, seen: dict[str, Any]
) -> Response:
    """The answer `POST /v1/responses` gives the body `content` (the steps of the module's
    docstring, in the POST's order). `seen`: what the statistics read of the request, the caller
    put in its `state` once known."""
    services, headers = upgrade.services, seen["headers"]
    limit = services.settings.max_body_bytes
    if len(content) > limit:
        message = f"Request body exceeds {limit} bytes (the proxy's --max-body-bytes)."
        return error_response(413, message, code="request_too_large", shape="openai")
    admin = services.settings.admin_token
    if presents_admin_token(admin.encode() if admin else None, Headers(raw=headers)):
        return response_of(not_a_credential())
    try:
        caller = upgrade.gatekeeper.identify(Headers(raw=headers), "openai")
    except ProxyError as exc:
        return response_of(exc, "openai")
    seen["state"]["caller"] = caller
    found = unknown_in(headers)
    if found is not None:
        upgrade.recording.metrics.count_unknown_headers(found.labels())
        rec.unknown_headers = [header.name for header in found.named]

    def opened() -> Awaitable[ManagedCall]:
        return ManagedCall.read(
            services,
            caller,
            RESPONSES,
            chunks=[content],
            codings=[],
            client_headers=headers,
            query=upgrade.query,
            watch=ClientWatch.until(gone),
        )

    return await respond(opened, shape="openai")


class Answer:
    """The route's answer to one create, as it is written: its status, then (200) its events'
    JSON texts."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.started = asyncio.Event()
        self.ended = asyncio.Event()  # its last part was written: what the route does after it is its own
        self._chunks: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUED_CHUNKS)
        self._error_body = bytearray()

    def start(self, status: int) -> None:
        self.status = status
        self.started.set()

    async def put(self, body: bytes) -> None:
        if self.status == 200:
            if body:
                await self._chunks.put(body)
        elif len(self._error_body) < MAX_ERROR_BODY:
            self._error_body += body[: MAX_ERROR_BODY - len(self._error_body)]

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


async def write(response: Response, answer: Answer, *, gone: asyncio.Event) -> None:
    """`response` into `answer` (a stream part by part; once the client has gone, nothing more is
    written and the stream stops, as Starlette stops it on a disconnect), then its background."""
    answer.start(response.status_code)
    if isinstance(response, StreamingResponse):
        chunks = response.body_iterator

        async def drain() -> None:
            async for chunk in chunks:
                if not gone.is_set():
                    await answer.put(chunk.encode(response.charset) if isinstance(chunk, str) else bytes(chunk))

        try:
            await ClientWatch.until(gone).run(drain())
        except ClientDisconnected:
            pass
        finally:
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()
    elif not gone.is_set():
        await answer.put(bytes(response.body))
    await answer.finish()
    if response.background is not None:
        await response.background()


async def dispatch(
    upgrade: Upgrade, content: bytes, *, gone: asyncio.Event, on_event: Callable[[str], Awaitable[None]]
) -> tuple[int, bytes]:
    """Answer the create whose body is `content` (`encoded`); each event of a 200 stream goes to
    `on_event` (its JSON text) as it comes. Returns the status and, when it is not 200, the
    answer's body. `gone`: set when the client has gone away."""
    answer = Answer()
    headers = body_headers(upgrade.headers, len(content))
    # what the statistics read of the request (`proxy.stats.Recorder.observe`)
    seen: dict[str, Any] = {"path": PATH, "headers": headers, "state": {}}

    async def run() -> None:
        try:
            with upgrade.recording.recorded("POST", PATH, seen, transport="websocket") as rec:
                response = await answer_to(upgrade, content, gone=gone, rec=rec, seen=seen)
                noted(rec, response.status_code, response.raw_headers)
                await write(response, answer, gone=gone)
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
        elif answer.ended.is_set():  # the answer is whole: what follows it (an observed turn's
            _AFTER.add(task)  # plan, the statistics, summaries) goes on, as after an HTTP answer
            task.add_done_callback(_retrieved)
        else:  # the client went away mid-answer: the turn stops
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return answer.status or 500, answer.error_body


_AFTER: set[asyncio.Task[None]] = set()  # creates whose answers are whole, running what follows them


def _retrieved(task: asyncio.Task[None]) -> None:
    """A create's route that has returned: its failure logged as an HTTP server logs one (never
    asyncio's "exception was never retrieved")."""
    _AFTER.discard(task)
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("a response.create's route failed", exc_info=error)
