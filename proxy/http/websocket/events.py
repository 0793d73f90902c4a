"""What travels on a Responses WebSocket: the client's events read, the server's `error` events
written.

An `error` event has the shape OpenAI's WebSocket mode sends and Codex reads
(`{"type": "error", "status": 400, "error": {"type", "code", "message", "param"}}`): `status` is
the HTTP status the same failure gets over HTTP, so a client maps it as it maps that answer.
With a `stream_id` (the request's lane), the event names it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

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
    ProxyError 400 `invalid_json`. A large frame comes as its UTF-8 bytes (`proxy.http.ws_protocol`)."""
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
