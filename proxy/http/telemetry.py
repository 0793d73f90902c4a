"""Client text in log lines, clipped: a client chooses the model name, session ids, paths,
header values, tool names, …; any of them may be a megabyte, and a log line must not be.

One mechanism for every log record of the process (the proxy's, uvicorn's access and error
lines, whatever the format, json or text): `install()` makes each record clip its string
arguments to MAX_LOGGED_CHARS, its whole message to MAX_MESSAGE_CHARS and each line of its
traceback to MAX_MESSAGE_CHARS. The access line (`proxy.http.telemetry.log_request`) is built
from values clipped with `clip` / `clip_value`.

Observability at the HTTP edge: the middleware, the `/metrics` endpoint and one structured
JSON log line per request.

A `RequestRecord` (`proxy.telemetry`) travels with each request in a context variable
(`current`, read by the HTTP layer alone, which hands the record down as a sink); the
handlers fill in what they know (tenant hash, model, tokens, action, reload rounds, upstream
timings) and the middleware turns it into metrics and the log line when the response has been
sent, streams included. The recording itself (`Recording`) is the middleware's and the Responses
WebSocket's alike: each `response.create` is recorded as the `POST /v1/responses` it stands for. No credential and no message content ever reaches a label or a log line, and no
client-chosen string longer than `MAX_LOGGED_CHARS` does."""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.jsonio import JsonObject
from proxy.http.error_map import error_response
from proxy.telemetry import MAX_TENANT_LABELS, Metrics, RequestRecord

MAX_LOGGED_CHARS = 300  # characters of one client-chosen value kept in a log line
MAX_MESSAGE_CHARS = 4_000  # characters of one log message (and of one line of a traceback)
MAX_LOGGED_ITEMS = 8  # entries of a list kept in the access line (its warnings)

_FORMATTER = logging.Formatter()


def clip(text: str, limit: int = MAX_LOGGED_CHARS) -> str:
    """`text`, or its first `limit` characters and how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[{len(text)} chars]"


def clip_value(value: Any) -> Any:
    """A JSON value for a log line with its strings clipped and its lists shortened."""
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, list):
        kept = [clip_value(v) for v in value[:MAX_LOGGED_ITEMS]]
        return kept + [f"…[{len(value) - MAX_LOGGED_ITEMS} more]"] if len(value) > MAX_LOGGED_ITEMS else kept
    return value


def _argument(value: Any) -> Any:
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, (bytes, bytearray)) and len(value) > MAX_LOGGED_CHARS:
        return bytes(value[:MAX_LOGGED_CHARS]) + b"..."
    if isinstance(value, BaseException):
        return clip(str(value))  # an error's message may quote what the client sent
    return value


def _traceback(exc_info: Any) -> str:
    return "\n".join(clip(line, MAX_MESSAGE_CHARS) for line in _FORMATTER.formatException(exc_info).split("\n"))


class ClippedRecord(logging.LogRecord):
    """A LogRecord whose arguments, message and traceback are clipped."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.args, tuple):
            self.args = tuple(_argument(a) for a in self.args)
        elif isinstance(self.args, Mapping):
            self.args = {k: _argument(v) for k, v in self.args.items()}
        if self.exc_info and self.exc_info[0] is not None:
            self.exc_text = _traceback(self.exc_info)  # formatters use it as it is

    def getMessage(self) -> str:
        return clip(super().getMessage(), MAX_MESSAGE_CHARS)


def install() -> None:
    """Every log record made from now on is a ClippedRecord (idempotent; keeps a custom factory's
    records as they are)."""
    if logging.getLogRecordFactory() is logging.LogRecord:
        logging.setLogRecordFactory(ClippedRecord)


# the record and the metrics live below the HTTP layer; named here too for the app and the tests

__all__ = [
    "MAX_TENANT_LABELS",
    "Metrics",
    "RequestRecord",
    "current",
    "Recording",
    "Observe",
    "route_of",
    "log_request",
    "JsonFormatter",
    "TextFormatter",
    "configure_logging",
    "configure_text_logging",
    "metrics_endpoint",
]

access_log = logging.getLogger("proxy.access")

# The request's record, set by the middleware (`Observe`) for the routes to find: read in the
# HTTP layer only, which hands it down as a sink (nothing below it reads a context variable).
current: ContextVar[RequestRecord | None] = ContextVar("offload_request_record", default=None)


def route_of(path: str) -> str:
    """A low-cardinality route label: managed routes by name, everything relayed as one."""
    if path.startswith("/v1/chat/completions"):
        return "chat"
    if path == "/v1/responses":
        return "responses"
    if path == "/v1/responses/compact":
        return "responses_compact"
    if path == "/v1/messages":
        return "messages"
    if path == "/v1/messages/count_tokens":
        return "count_tokens"
    if path.startswith("/v1/offload"):
        return "offload_api"
    if path.startswith("/v1/"):
        return "relay"
    if path == "/dashboard" or path.startswith("/dashboard/"):
        return "dashboard"
    # anything else by its own name only when it is one of ours: a client-chosen path never
    # becomes a label value (each would be a new time series, kept for the process's life)
    name = path.strip("/")
    return name if name in ("healthz", "readyz", "metrics") else "other"


TURN_ROUTES = frozenset({"chat", "responses", "responses_compact", "messages"})


class Recording:
    """A RequestRecord per request, then metrics, the JSON log line and `on_finished` (the usage
    statistics: it must not block). `on_started` is called as a turn's request comes in and
    returns what to call once `on_finished` has seen it: its client may have the answer before
    then, and whoever reads the statistics right after must know one is held. Whatever carries
    the request (`Observe`, the Responses WebSocket) runs it inside `recorded`."""

    def __init__(
        self,
        metrics: Metrics,
        on_finished: Callable[[RequestRecord, Scope], None] | None = None,
        *,
        on_started: Callable[[], Callable[[], None]] | None = None,
    ) -> None:
        self.metrics, self.on_finished, self.on_started = metrics, on_finished, on_started

    @contextmanager
    def recorded(
        self, method: str, path: str, scope: Scope, *, transport: str | None = None
    ) -> Iterator[RequestRecord]:
        """The request's record, `current` while it runs, recorded when it ends. `scope`: what
        `on_finished` reads of the request (its path, its headers, `state.caller`)."""
        rec = RequestRecord(route_of(path), method, path, metrics=self.metrics, transport=transport)
        token = current.set(rec)
        release = self.on_started() if self.on_started is not None and rec.route in TURN_ROUTES else None
        try:
            yield rec
        finally:
            current.reset(token)
            elapsed = time.perf_counter() - rec.started
            if rec.route not in ("healthz", "readyz", "metrics"):
                try:
                    self.metrics.observe(rec, elapsed)
                    log_request(rec, elapsed)
                    if self.on_finished is not None:
                        self.on_finished(rec, scope)
                except Exception:  # accounting must never break a request
                    access_log.exception("could not record the request")
            if release is not None:
                release()


def noted(rec: RequestRecord, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
    """What the record learns of the response's start: its status, its `X-Request-Id`."""
    rec.status = status
    for name, value in headers:
        if name.lower() == b"x-request-id":
            rec.request_id = value.decode("latin-1")


class Observe:
    """ASGI middleware: each HTTP request recorded (`Recording`)."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        on_finished: Callable[[RequestRecord, Scope], None] | None = None,
        *,
        on_started: Callable[[], Callable[[], None]] | None = None,
    ) -> None:
        self.app, self.recording = app, Recording(metrics, on_finished, on_started=on_started)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with self.recording.recorded(scope["method"], scope["path"], scope) as rec:

            async def recording_send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    noted(rec, message["status"], message.get("headers", ()))
                await send(message)

            await self.app(scope, receive, recording_send)


def log_request(rec: RequestRecord, elapsed: float) -> None:
    if not access_log.isEnabledFor(logging.INFO):
        return
    line = {k: v for k, v in vars(rec).items() if v is not None and v != []}
    for internal in ("started", "metrics", "continues", "response_id", "forwarded", "bill", "summary_bill"):
        line.pop(internal, None)
    for name, bill in (("billed", rec.bill.total), ("summary_billed", rec.summary_bill)):
        if bill.answers or bill.unreported:  # what the upstream reported it billed (`proxy.core.answers`)
            line[name] = {
                **{k: v for k, v in bill.tokens().items() if v},
                "answers": bill.answers,
                **({"without_usage": bill.unreported} if bill.unreported else {}),
            }
    line.pop("upstream_sent", None)
    if not rec.observed:
        line.pop("observed", None)
    line = {k: clip_value(v) for k, v in line.items()}  # the model, the session, warnings: the client's text
    line["duration_ms"] = round(elapsed * 1e3, 2)
    if rec.upstream_sent is not None:
        line["overhead_ms"] = round((rec.upstream_sent - rec.started) * 1e3, 2)
    if rec.upstream_ttfb is not None:
        line["upstream_ttfb_ms"] = round(rec.upstream_ttfb * 1e3, 2)
        line.pop("upstream_ttfb", None)
    access_log.info(json.dumps(line, separators=(",", ":")))


def json_line(value: JsonObject) -> str:
    """`value` as one line of JSON, non-ASCII text kept as is (written UTF-8, not `\\u2026`); the
    Unicode line and paragraph separators stay escaped so that no line reader splits the record."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


class JsonFormatter(logging.Formatter):
    """Every log record as one JSON object; access lines are already JSON and are merged in."""

    def format(self, record: logging.LogRecord) -> str:
        base = {"time": round(record.created, 3), "level": record.levelname.lower(), "logger": record.name}
        message = record.getMessage()
        if record.name == access_log.name and message.startswith("{"):
            try:
                return json_line({**base, "event": "request", **json.loads(message)})
            except ValueError:
                pass  # clipped (proxy.http.telemetry): logged as a message
        base["message"] = message
        if record.exc_info:
            base["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json_line(base)


class TextFormatter(logging.Formatter):
    """`--log-format text`: a line per record; an access line as `METHOD path status duration`
    then what else it knows, `key=value`, zeros left out."""

    LEAD = ("method", "path", "status", "duration_ms")

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = record.message
        if record.name == access_log.name and message.startswith("{"):
            try:
                line = json.loads(message)
            except ValueError:
                line = None  # clipped (proxy.http.telemetry): logged as it is
            if isinstance(line, dict):
                lead = [
                    f"{line.get('method', '')} {line.get('path', '')} {line.get('status', '')}",
                    f"{line.get('duration_ms', '')}ms",
                ]
                rest = [
                    f"{k}={json.dumps(v) if isinstance(v, (list, dict)) else v}"
                    for k, v in line.items()
                    if k not in self.LEAD and v not in (0, False)
                ]
                record.message = " ".join(lead + rest)
        return super().formatMessage(record)


def _configure(level: str, formatter: logging.Formatter) -> None:
    install()
    handler = logging.StreamHandler()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def configure_text_logging(level: str) -> None:
    _configure(level, TextFormatter())


def configure_logging(level: str) -> None:
    _configure(level, JsonFormatter())


def metrics_endpoint(admin_token: str | None, metrics: Metrics) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        presented = request.headers.get("authorization", "").encode()
        if admin_token and not hmac.compare_digest(presented, f"Bearer {admin_token}".encode()):
            return error_response(
                401, "This endpoint needs the admin token.", type_="authentication_error", code="admin_token_required"
            )
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return endpoint
