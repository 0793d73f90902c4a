"""The upgrade: `GET /v1/responses` (or `/responses`) asking for a WebSocket.

The upgrade request's headers decide who is calling with the rules of every HTTP request
(`proxy.http.caller`: credential, proxy key, `X-Offload-Tenant`; the `X-Offload-*` settings
headers, as `proxy.http.call_parts.request_settings` reads them); a caller HTTP would refuse is
refused before the connection is accepted, with the HTTP status and error body HTTP would answer
(a WebSocket client, Codex among them, reads it as the failed request it is). So is a tenant
(its key or credential as a whole) that already holds `--ws-connections-per-tenant` connections
in this worker: 429, `too_many_connections`; so is any upgrade once the worker holds
`--ws-connections` in all (a made-up credential is only checked by the upstream at its first
`response.create`, so a count per credential alone would not bound idle connections). An
upgrade carrying `Origin` is refused (403 `origin_not_allowed`): only a browser sends one, and
browsers apply no cross-origin check to WebSockets, so a page could otherwise reach the proxy
(and the operator's key, with `--allow-anonymous`) from the user's machine; SDKs and agent CLIs
send none. Each `response.create` then goes through the same caller gate again, with the same
headers (`proxy.http.websocket.dispatch`). Unknown `X-Offload-*` headers are named in the 101's
`X-Offload-Warning` (`proxy.http.headers`).
"""

from __future__ import annotations

import logging
from collections import Counter

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.core.settings import SettingsResolver
from proxy.errors import Kind, ProxyError
from proxy.http.caller import Caller, Gatekeeper
from proxy.http.error_map import error_response, response_of
from proxy.http.headers import unknown_in, with_warning
from proxy.http.telemetry import Recording
from proxy.http.websocket.chain import Budget
from proxy.http.websocket.connection import Connection, Limits
from proxy.http.websocket.dispatch import Upgrade

log = logging.getLogger("proxy.http.websocket")


class OpenConnections:
    """How many WebSockets each tenant (a caller's `scope`) holds open in this worker."""

    def __init__(self, limit: int, total: int = 0) -> None:
        self.limit, self.total = limit, total  # 0: no limit
        self._open: Counter[str] = Counter()
        self._count = 0

    def take(self, scope: str) -> str | None:
        """Count one more for `scope`; or why it may not open one more (nothing counted)."""
        if self.total and self._count >= self.total:
            return (
                f"This proxy worker already holds {self.total} WebSocket connections (--ws-connections): "
                "try again later, or use POST /v1/responses."
            )
        if self.limit and self._open[scope] >= self.limit:
            return (
                f"This tenant already holds {self.limit} WebSocket connections to this proxy worker "
                "(--ws-connections-per-tenant): close one, or use POST /v1/responses."
            )
        self._open[scope] += 1
        self._count += 1
        return None

    def give_back(self, scope: str) -> None:
        self._count -= 1
        self._open[scope] -= 1
        if self._open[scope] <= 0:
            del self._open[scope]

    def __len__(self) -> int:
        return self._count


class ResponsesSocket:
    """The ASGI endpoint of the WebSocket route; every response.create is answered with the
    caller gate and the request recording `POST /v1/responses` has (`recording`, the app's own
    kind: `proxy.http.telemetry.Recording`), by its route called directly (`dispatch`)."""

    def __init__(
        self,
        gatekeeper: Gatekeeper,
        resolver: SettingsResolver,
        limits: Limits,
        *,
        recording: Recording,
        per_tenant: int,
        total: int = 0,
    ) -> None:
        self.gatekeeper, self.resolver, self.limits, self.recording = gatekeeper, resolver, limits, recording
        self.open = OpenConnections(per_tenant, total)
        self.held = Budget(limits.held_bytes)  # what all connections of this worker hold

    def _caller(self, headers: Headers) -> Caller:
        """Who calls, its `X-Offload-*` headers checked: the refusals of every HTTP request
        (401, 403, 400 `invalid_offload_header`), here once for the whole connection; a browser's
        upgrade (it carries `Origin`) refused first."""
        if "origin" in headers:
            raise ProxyError(
                Kind.PERMISSION_DENIED,
                "WebSocket upgrades from a browser (an Origin header) are not served: use the "
                "Responses API over HTTP, or a client that sends no Origin.",
                code="origin_not_allowed",
            )
        caller = self.gatekeeper.identify(headers, "openai")
        self.resolver.resolve(headers, tenant=caller.tenant)  # SettingsError: a refused header
        return caller

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            caller = self._caller(Headers(scope=scope))
        except ProxyError as exc:
            await _refuse(scope, receive, send, response=response_of(exc), code=1008, reason=exc.message)
            return
        message = self.open.take(caller.scope)
        if message is not None:
            refusal = error_response(429, message, type_="rate_limit_error", code="too_many_connections")
            await _refuse(scope, receive, send, response=refusal, code=1013, reason="too many connections")
            return
        try:
            first = await receive()
            if first["type"] != "websocket.connect":
                return
            found = unknown_in(scope["headers"])  # said in the 101; counted per response.create
            await send({"type": "websocket.accept", "headers": with_warning([], found.warning()) if found else []})
            upgrade = Upgrade.of(scope, gatekeeper=self.gatekeeper, recording=self.recording)
            await Connection(
                upgrade, receive=receive, send=send, limits=self.limits, budget=self.held, check=caller.check_body
            ).serve()
        finally:
            self.open.give_back(caller.scope)


async def _refuse(scope: Scope, receive: Receive, send: Send, *, response: Response, code: int, reason: str) -> None:
    """Before accepting: the HTTP answer itself where the server can send one (uvicorn can), else
    a close with `code` (1008 policy, 1013 try again later)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        await response(scope, receive, send)  # starlette sends it as websocket.http.response.*
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.close", "code": code, "reason": reason[:120]})
