"""Unknown `X-Offload-*` request headers: the request is served as without them, its answer
says so.

Every request under /v1 is looked at, managed or relayed (a client such as Claude Code sends
its custom headers on every request, and none of them ever goes upstream:
`proxy.http.headers`), the direct API's too. The answer carries `X-Offload-Warning` naming
each unknown header and the known one closest to it (`proxy.core.header_names`), after any
warning of the turn's own; each is counted in `offload_unknown_headers_total` and listed in the
request's log line. A request refused before it is routed (a missing credential) is not counted.
A WebSocket's upgrade carries the warning in its 101 (`proxy.http.websocket.route`); each
`response.create` on it is counted as the request it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.header_names import UnknownHeaders, unknown_headers
from proxy.http.telemetry import current
from proxy.telemetry import Metrics

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
