"""What travels on a Responses WebSocket: the client's events read, the server's `error` events
written.

An `error` event has the shape OpenAI's WebSocket mode sends and Codex reads
(`{"type": "error", "status": 400, "error": {"type", "code", "message", "param"}}`): `status` is
the HTTP status the same failure gets over HTTP, so a client maps it as it maps that answer.
With a `stream_id` (the request's lane), the event names it.

uvicorn's WebSocket protocol (websockets-sansio, what `ws="auto"` picks), with what it lacks
for a server facing clients it does not trust.

- **The pongs owed to a client that does not read.** uvicorn answers every ping at once with
  `transport.write`, past the flow control its `send` respects: a client sending pings and never
  reading what comes back made the server buffer its pongs without end (measured: 200 MB of
  pings, 186 MB of pongs waiting in the server's memory). Once writing is paused (the client is
  not reading: the transport's buffer is past its high-water mark), at most MAX_PINGS_UNREAD more
  pings are answered; the one after drops the connection (1006 to the client; the proxy sees it
  go away as it sees any client leave). A client's keepalive pings never come near it.
- **Large text messages are not decoded on the event loop.** uvicorn decodes every text message
  to a `str` where it reads it (60 MiB: 0.25 s holding the interpreter); one over LARGE_TEXT is
  handed to the app as its UTF-8 bytes (`TEXT_BYTES`), which the proxy parses off the loop as it
  parses a large HTTP body (`proxy.http.websocket.connection`).
- **A refused upgrade is no error.** uvicorn logs "ASGI callable returned without completing
  handshake." at error level after every HTTP answer sent before the accept (the
  `websocket.http.response` extension, how the proxy refuses an upgrade); here such an answer
  completes the handshake.
- **No query string in its log lines, no headers.** uvicorn's `"WebSocket <path>" [accepted]` /
  status lines carry the path with its query string, where a client may have put a key
  (`?api_key=`); they are logged with the path alone, as the proxy's access line logs a request.
  With `--log-level debug`, websockets' protocol logged every upgrade header (`Authorization`
  with the credential) and the start of every frame: its debug lines are off.

permessage-deflate is not negotiated (`proxy.cli.uvicorn_options`, `ws_per_message_deflate`):
uvicorn inflates each compressed frame on the event loop, inside `data_received`, where nothing
can move it off; 62 KB of deflate made 60 MiB of text and held the loop 1 s (docs/websocket.md)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from proxy.core import jsonio
from proxy.core import jsonio as large_json
from proxy.core.jsonio import footprint
from proxy.errors import Kind, ProxyError
from proxy.formats.json_body import LARGE_BODY, check_count
from proxy.http.error_map import STATUSES

CREATE = "response.create"
# Codex sends this after handling a response (behind a feature flag): an acknowledgement, nothing to answer
ACKNOWLEDGEMENTS = frozenset({"response.processed"})
MAX_STREAM_ID_CHARS = 256
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})


def error_event(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    stream_id: str | None = None,
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "error",
        "status": status,
        "error": {"type": type_, "code": code, "message": message, "param": param},
    }
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def from_proxy_error(exc: ProxyError, stream_id: str | None = None) -> dict[str, Any]:
    status = STATUSES[exc.kind]  # the status and type the same failure gets over HTTP
    return error_event(
        status.status, exc.message, type_=status.type_, code=exc.code, param=exc.param, stream_id=stream_id
    )


def from_http_answer(status: int, body: bytes, stream_id: str | None = None) -> dict[str, Any]:
    """A non-200 answer of the managed route (the proxy's own error or the upstream's) as an
    `error` event: its `error` object kept, its status said."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    detail = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("message"), str):
        event = error_event(
            status,
            detail["message"],
            type_=str(detail.get("type") or "server_error"),
            code=detail.get("code") if isinstance(detail.get("code"), str) else None,
            param=detail.get("param") if isinstance(detail.get("param"), str) else None,
            stream_id=stream_id,
        )
        return event
    text = body[:500].decode("utf-8", "replace").strip()
    return error_event(
        status,
        f"The upstream answered {status}: {text}" if text else f"The upstream answered {status}.",
        type_="server_error" if status >= 500 else "invalid_request_error",
        code="upstream_error",
        stream_id=stream_id,
    )


@dataclass(frozen=True)
class Create:
    """One `response.create`: the body of `POST /v1/responses` (streaming implied) and its lane."""

    body: dict[str, Any]
    stream_id: str | None
    size: int = 0  # characters of its frame (what a continuation of it sends again)
    memory: int = 0  # bytes its body holds once parsed (proxy.core.jsonio): what waiting costs


def decode(text: str | bytes) -> Any:
    """A client text frame's JSON (any type), as an HTTP body is read (`proxy.core.jsonio`; a
    large one by `large_json`, which lets other threads run: call it off the event loop), else
    ProxyError 400 `invalid_json`. A large frame comes as its UTF-8 bytes (`proxy.http.websocket.wire`)."""
    try:
        if len(text) > LARGE_BODY:
            return large_json.loads_yielding(text.encode() if isinstance(text, str) else text)
        return jsonio.loads(text)
    except jsonio.TooDeep:
        raise ProxyError(Kind.BAD_REQUEST, "A frame is nested too deep to read.", code="invalid_json") from None
    except (ValueError, UnicodeEncodeError):
        raise ProxyError(
            Kind.BAD_REQUEST,
            "A frame is not JSON (or not UTF-8): every client event is a JSON object with a "
            "`type` (e.g. `response.create`).",
            code="invalid_json",
        ) from None


def parse(text: str | bytes, *, max_items: int | None = None) -> Create | None:
    """A client text frame: a `response.create` (Create, its memory counted), an acknowledgement
    (None), else ProxyError 400 naming what is wrong: more than `max_items` input items is
    `too_many_messages`, as over HTTP (`--max-messages`)."""
    create = read(decode(text), size=len(text))
    if create is None:
        return None
    check_count(create.body, items="input", noun="input items", limit=max_items)
    return replace(create, memory=footprint(create.body))


def read(event: Any, *, size: int = 0) -> Create | None:
    """A decoded client event (`parse`)."""
    if not isinstance(event, dict):
        raise ProxyError(Kind.BAD_REQUEST, "A client event must be a JSON object.", code="invalid_event")
    kind = event.get("type")
    if isinstance(kind, str) and kind in ACKNOWLEDGEMENTS:  # a list or object `type` is unhashable
        return None
    if kind != CREATE:
        shown = kind[:80] if isinstance(kind, str) else type(kind).__name__
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"Unsupported client event type {shown!r}: this proxy serves `response.create` "
            "(and accepts `response.processed`).",
            code="unknown_event_type",
            param="type",
        )
    stream_id = event.get("stream_id")
    if stream_id is not None and (
        not isinstance(stream_id, str) or not stream_id or len(stream_id) > MAX_STREAM_ID_CHARS
    ):
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"stream_id must be a non-empty string of at most {MAX_STREAM_ID_CHARS} characters.",
            code="invalid_value",
            param="stream_id",
        )
    if event.get("background") is True:
        raise ProxyError(
            Kind.BAD_REQUEST,
            "background is not supported over WebSocket; use POST /v1/responses.",
            code="unsupported_parameter",
            param="background",
        )
    body = {k: v for k, v in event.items() if k not in ("type", "stream_id")}
    body["stream"] = True
    return Create(body, stream_id, size)


def with_stream_id(data: str, stream_id: str | None) -> str:
    """An event's JSON text, naming its lane (spliced in before the object's closing brace)."""
    if stream_id is None:
        return data
    end = data.rstrip()
    if not end.endswith("}") or not end.lstrip().startswith("{"):
        return data
    body = end[:-1].rstrip()
    sep = "" if body.endswith("{") else ","
    return f'{body}{sep}"stream_id":{json.dumps(stream_id)}}}'


MAX_PINGS_UNREAD = 1000  # of at most 127 bytes each: ~125 KB of pongs past the high-water mark
LARGE_TEXT = 1024 * 1024  # bytes: a text message above is handed over undecoded (proxy.formats.json_body.LARGE_BODY)
TEXT_BYTES = "offload.text_bytes"  # a websocket.receive's key holding a large text message's UTF-8 bytes


class _PathOnlyLogger(logging.LoggerAdapter[logging.Logger]):
    """uvicorn's logger for one connection: its `"WebSocket %s"` lines without the query string."""

    @property
    def level(self) -> int:  # uvicorn reads it to decide on its trace lines
        return self.logger.level

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(msg, str) and '"WebSocket %s"' in msg:
            args = tuple(a.partition("?")[0] if isinstance(a, str) else a for a in args)
        self.logger.info(msg, *args, **kwargs)


class Protocol(WebSocketsSansIOProtocol):
    pings_unread = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = _PathOnlyLogger(self.logger, {})  # type: ignore[assignment]
        self.conn.debug = False  # websockets' debug lines: every upgrade header (the credential) and frame

    def handle_ping(self) -> None:
        if not self.writable.is_set():
            self.pings_unread += 1
            if self.pings_unread > MAX_PINGS_UNREAD:
                self.transport.abort()
                return
        super().handle_ping()

    def resume_writing(self) -> None:
        self.pings_unread = 0
        super().resume_writing()

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type != "text" or sum(map(len, self.frames)) <= LARGE_TEXT:
            super().send_receive_event_to_app()
            return
        # uvicorn's own steps, but the text left as its UTF-8 bytes
        data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        self.frames = []
        if self.close_sent:
            return
        message: Any = {"type": "websocket.receive", "text": None, "bytes": None, TEXT_BYTES: data}
        self.queue.put_nowait(message)  # an ASGI message with a key of the proxy's own
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            self.handshake_complete = True  # answered: the handshake is over, refused
