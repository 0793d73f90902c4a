"""Which headers cross the proxy, in each direction, and unknown `X-Offload-*` request headers.

An unknown `X-Offload-*` header: the request is served as without it, its answer says so
(`UnknownHeaderWarning`). Every request under /v1 is looked at, managed or relayed (a client such
as Claude Code sends its custom headers on every request, and none of them ever goes upstream:
`request_headers_for_upstream`), the direct API's too. The answer carries `X-Offload-Warning`
naming each unknown header and the known one closest to it (`proxy.core.settings`), after any
warning of the turn's own; each is counted in `offload_unknown_headers_total` and listed in the
request's log line. A request refused before it is routed (a missing credential) is not counted.
A WebSocket's upgrade carries the warning in its 101 (`proxy.http.websocket.connection`); each
`response.create` on it is counted as the request it is."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.settings import HEADER_PREFIX, UnknownHeaders, unknown_headers
from proxy.http.telemetry import current
from proxy.telemetry import Metrics

# RFC 9110 §7.6.1 connection-specific headers, plus the ones httpx2/uvicorn recompute themselves.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# every X-Offload-* header is the proxy's (`proxy.core.settings` reads the settings among them)
OFFLOAD_PREFIX = HEADER_PREFIX.encode()


def request_headers_for_upstream(
    raw: Iterable[tuple[bytes, bytes]], *, body_replaced: bool = False
) -> list[tuple[bytes, bytes]]:
    """Client headers minus hop-by-hop, Host and every X-Offload-* header (spelt with underscores
    too: a gateway mapping them to dashes would read ours), each value without
    the whitespace around it (RFC 9110 §5.5: no part of the value; uvicorn's parser may keep a
    trailing one, which the upstream client refuses to send).

    `body_replaced`: the proxy rewrote the body, so its length (and encoding) are recomputed.
    """
    drop = HOP_BY_HOP | {b"host"}
    if body_replaced:
        drop = drop | {b"content-length", b"content-encoding"}
    return [
        (k, v.strip(b" \t"))
        for k, v in raw
        if (lk := k.lower()) not in drop and not lk.replace(b"_", b"-").startswith(OFFLOAD_PREFIX)
    ]


def response_headers_for_client(
    raw: Iterable[tuple[bytes, bytes]], *, decoded: bool = False
) -> list[tuple[bytes, bytes]]:
    """Upstream response headers minus hop-by-hop ones.

    `decoded`: the proxy re-encodes the body itself, so length and content-encoding are dropped.
    """
    drop = HOP_BY_HOP
    if decoded:
        drop = drop | {b"content-length", b"content-encoding"}
    return [(k, v) for k, v in raw if k.lower() not in drop]


WARNING = b"x-offload-warning"
Headers = list[tuple[bytes, bytes]]


def unknown_in(raw: Iterable[tuple[bytes, bytes]]) -> UnknownHeaders | None:
    return unknown_headers(name.decode("latin-1") for name, _ in raw)


def with_warning(headers: Iterable[tuple[bytes, bytes]], warning: str) -> Headers:
    """`headers` with `warning` added to their X-Offload-Warning (after its text), or as one."""
    text = warning.encode("ascii", "replace")
    out, added = [], False
    for name, value in headers:
        if not added and name.lower() == WARNING:
            value, added = (value + b"; " + text if value else text), True
        out.append((name, value))
    return out if added else [*out, (WARNING, text)]


class UnknownHeaderWarning:
    """ASGI middleware: the warning and the count of a request's unknown `X-Offload-*` headers."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        found = (
            unknown_in(scope["headers"])
            if scope["type"] == "http" and (path == "/v1" or path.startswith("/v1/"))
            else None
        )
        if found is None:
            await self.app(scope, receive, send)
            return
        self.metrics.count_unknown_headers(found.labels())
        rec = current.get()
        if rec is not None:
            rec.unknown_headers = [header.name for header in found.named]
        warning = found.warning()

        async def warned(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": with_warning(message.get("headers") or (), warning)}
            await send(message)

        await self.app(scope, receive, warned)
