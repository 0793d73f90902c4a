"""Usage statistics as JSON: what the dashboard draws, and what scripts may read.

GET /v1/offload/stats?window=15m|1h|24h|7d|30d[&tenant=]   totals and a time series of a window
GET /v1/offload/sessions[?tenant=&limit=&offset=]       a tenant's sessions, last active first
GET /v1/offload/sessions/{id}[?tenant=]                 one session's totals and last turns

The statistics of one tenant (a tenant's own, or the admin's with `tenant=`) carry a `holdout`
section: the holdout's two arms compared over their most recent sessions, whatever the window
(`proxy.stats`; over more than SMALL_COMPARISON sessions, computed at most once
every HOLDOUT_EVERY seconds per tenant and worker: a bootstrap over a thousand sessions per arm
takes a few tenths of a second, off the event loop).

Access: a tenant's credential (its proxy key, or its own provider key) reads its own namespace
only; `tenant=` naming another is refused (403). The admin token (`--admin-token`, as
`Authorization: Bearer <token>`) reads every tenant: the all-tenants totals and the tenants
table by default, one tenant with `tenant=` (a tenants-file name or a namespace).

The admin token is recognised by `AdminGate`, in front of `CallerGate`: on these routes it is
answered here and never identified as a client credential; on any other /v1 route it is
refused (403), so it is never relayed upstream nor becomes a namespace.

The dashboard (`Dashboard`, `GET /dashboard`): the statistics as a page a person reads, a static
shell (HTML, its script, its styles and a small SVG chart module, all in `proxy/http/static/`,
nothing from a CDN). It holds no data: it asks for a token (the admin token, or a tenant's
credential) and draws what the JSON API above answers for that token, so it sees exactly what the
API lets the token see. The token is kept in the tab's sessionStorage and sent as
`Authorization: Bearer`, never in a cookie or a URL.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse as StarletteJSONResponse
from starlette.responses import Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.errors import Kind, ProxyError
from proxy.http import error_map
from proxy.http.call_parts import services_of
from proxy.http.caller import Caller, presented_credentials
from proxy.http.error_map import JSONResponse, response_of
from proxy.http.routing import not_routed
from proxy.offload.cpu_pool import CPU
from proxy.offload.tenant import namespace_for
from proxy.stats import (
    WINDOWS,
    display_name,
    holdout_outcomes,
    holdout_report,
    session_detail,
    sessions_page,
    span_of,
    tenant_labels,
    tenant_rows,
    window_stats,
)

# a session id may hold `/` (X-Offload-Session admits it): the drill-down takes the rest of the path
STATS_PATHS = re.compile(r"/v1/offload/(stats|sessions)/?|/v1/offload/sessions/.+")
NAMESPACE = re.compile(r"[0-9a-f]{32}")
DEFAULT_LIMIT, MAX_LIMIT = 50, 500
SMALL_COMPARISON = 100  # sessions compared on the event loop (about 10 ms), more off it
HOLDOUT_EVERY = 10.0  # seconds a tenant's holdout comparison is reused for
MAX_MEMO = 256  # tenants whose comparison a worker keeps


class StatsApi:
    """The routes, knowing the tenants-file names (`names`: namespace → name)."""

    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = dict(names)
        self.by_name = {name: ns for ns, name in self.names.items()}
        # (namespace, the fraction its reader's settings give) -> (when, section); its comparison being made
        self._holdouts: dict[tuple[str, float], tuple[float, dict[str, Any]]] = {}
        self._computing: dict[tuple[str, float], asyncio.Task[dict[str, Any]]] = {}

    def routes(self) -> list[Route]:
        return [
            Route("/v1/offload/stats", self.stats, methods=["GET"]),
            Route("/v1/offload/sessions", self.sessions, methods=["GET"]),
            Route("/v1/offload/sessions/{session:path}", self.session, methods=["GET"]),
        ]

    def _named(self, value: str) -> str:
        """A `tenant=` value as a namespace: a tenants-file name, or a namespace itself."""
        if value in self.by_name:
            return self.by_name[value]
        if NAMESPACE.fullmatch(value):
            return value
        raise ProxyError(Kind.NOT_FOUND, f"No tenant {value!r}.", code="tenant_not_found", param="tenant")

    def namespace(self, request: Request, *, required: bool) -> str | None:
        """Whose statistics the request may read: its own namespace; an admin's `tenant=`
        (None: all tenants, unless `required`)."""
        wanted = request.query_params.get("tenant", "").strip()
        if request.scope.get("state", {}).get("admin"):
            if not wanted and required:
                raise ProxyError(
                    Kind.BAD_REQUEST,
                    "The admin token reads one tenant here: add ?tenant=<name or namespace>.",
                    code="tenant_required",
                    param="tenant",
                )
            return self._named(wanted) if wanted else None
        caller: Caller = request.state.caller
        if caller.kind == "anonymous":  # one namespace for every anonymous client: as with events
            raise ProxyError(
                Kind.UNAUTHORIZED,
                "Statistics need a credential: anonymous clients share one namespace.",
                code="missing_api_key",
            )
        own = {caller.namespace, display_name(caller.namespace, self.names)}  # as `tenant`, as `name`
        if wanted and wanted not in own and self.by_name.get(wanted) != caller.namespace:
            raise ProxyError(
                Kind.PERMISSION_DENIED,
                "This credential reads its own tenant's statistics only.",
                code="tenant_forbidden",
                param="tenant",
            )
        return caller.namespace

    async def _tenant(self, request: Request, namespace: str | None) -> dict[str, Any]:
        """`tenant`, `name` (its tenants-file name, else 12 digits of it: a `tenant=` value) and
        `label` (what a person calls it: the name, else its key's fingerprint, else `name`)."""
        if namespace is None:
            return {"tenant": None, "name": None, "label": None}
        services = services_of(request)
        name = display_name(namespace, self.names)
        found = await tenant_labels(services.store, [namespace], self.names, sealer=services.sealer)
        return {"tenant": namespace, "name": name, "label": found[namespace] or name}

    async def stats(self, request: Request) -> Response:
        async def run() -> dict[str, Any]:
            window = request.query_params.get("window", "24h")
            if window not in WINDOWS:
                raise ProxyError(
                    Kind.BAD_REQUEST,
                    f"window must be one of {', '.join(WINDOWS)}; got {window!r}.",
                    code="invalid_window",
                    param="window",
                )
            namespace = self.namespace(request, required=False)
            services = services_of(request)
            span = span_of(window, time.time())
            admin = bool(request.scope.get("state", {}).get("admin"))
            # taken before the totals are read: an answer whose recorder holds nothing has totals
            # counting every turn written so far
            recorder = asdict(services.recorder.snapshot()) if namespace is None else None
            body: dict[str, Any] = {
                "object": "offload.stats",
                "window": window,
                **await self._tenant(request, namespace),
                "viewer": "admin" if admin else "tenant",
                "from": span.start,
                "to": span.end,
                "now": span.now,
                "step": span.window.step,
            }
            body.update(await window_stats(services.store, span, namespace))
            body["health"] = {"store": await services.store.ping()}
            if admin:  # this worker's background work, which no tenant's credential sees
                body["health"]["scheduler"] = asdict(services.summaries.state())
            if namespace is not None:
                body["holdout"] = await self.holdout(request, namespace)
            if namespace is None:  # the admin's view of all tenants
                body["tenants"], body["tenants_truncated"] = await tenant_rows(
                    services.store, span, self.names, sealer=services.sealer
                )
                body["recorder"] = recorder
            return body

        return await answer(run)

    async def holdout(self, request: Request, namespace: str) -> dict[str, Any]:
        """The tenant's holdout comparison (a large one reused for HOLDOUT_EVERY seconds; one
        made at a time per tenant, requests coming meanwhile wait for it)."""
        resolver = services_of(request).settings_resolver
        admin = bool(request.scope.get("state", {}).get("admin"))
        entry = self.names.get(namespace) if admin else request.state.caller.tenant  # whose settings apply
        fraction = resolver.resolve({}, tenant=entry).holdout
        key = (namespace, fraction)
        memo = self._holdouts.get(key)
        if memo is not None and time.monotonic() - memo[0] < HOLDOUT_EVERY:
            return memo[1]
        task = self._computing.get(key)
        if task is None:
            task = self._computing[key] = asyncio.ensure_future(self._compare(request, key))
            task.add_done_callback(
                lambda done: (self._computing.pop(key, None), done.cancelled() or done.exception())
            )  # retrieved: never logged as lost
        return await asyncio.shield(task)  # a client going away leaves it to the others

    async def _compare(self, request: Request, key: tuple[str, float]) -> dict[str, Any]:
        now = time.monotonic()
        namespace, fraction = key
        outcomes, kept = await holdout_outcomes(services_of(request).store, namespace)
        section = await CPU(len(outcomes) > SMALL_COMPARISON)(holdout_report, outcomes, kept=kept, fraction=fraction)
        if len(outcomes) > SMALL_COMPARISON:  # a small one is made again each time (its store reads cost more)
            if len(self._holdouts) >= MAX_MEMO:
                self._holdouts.clear()
            self._holdouts[key] = (now, section)
        return section

    async def sessions(self, request: Request) -> Response:
        async def run() -> dict[str, Any]:
            namespace = self.namespace(request, required=True)
            assert namespace is not None
            limit = _int(request, "limit", default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
            offset = _int(request, "offset", default=0, low=0, high=10**9)
            total, rows = await sessions_page(services_of(request).store, namespace, offset, limit=limit)
            return {
                "object": "list",
                **await self._tenant(request, namespace),
                "total": total,
                "offset": offset,
                "limit": limit,
                "has_more": offset + len(rows) < total,
                "data": rows,
            }

        return await answer(run)

    async def session(self, request: Request) -> Response:
        async def run() -> dict[str, Any]:
            namespace = self.namespace(request, required=True)
            assert namespace is not None
            services = services_of(request)
            found = await session_detail(
                services.store, namespace, request.path_params["session"], sealer=services.sealer
            )
            if found is None:
                raise ProxyError(Kind.NOT_FOUND, "No statistics for this session.", code="session_not_found")
            return {"object": "offload.session", **await self._tenant(request, namespace), **found}

        return await answer(run)


async def answer(run: Callable[[], Awaitable[Any]]) -> Response:
    """`run()`'s value as JSON, never cached, or the proxy's error (`proxy.http.error_map`)."""

    async def json() -> Response:
        return JSONResponse(await run(), headers={"cache-control": "no-store"})

    return await error_map.answered(json)


def _int(request: Request, name: str, *, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"{name} must be an integer from {low} to {high}; got {raw!r}.",
            code="invalid_parameter",
            param=name,
        )
    return value


def tenant_names(tenants: Mapping[str, object], secret: str | None) -> dict[str, str]:
    """namespace → name of every tenant of the tenants file (as `Gatekeeper` derives them)."""
    return {namespace_for("tenant", [name], None, secret=secret): name for name in tenants}


def presents_admin_token(token: bytes | None, headers: Headers) -> bool:
    """Whether a request with these headers presents the admin token (in any credential header)."""
    presented = presented_credentials(headers)
    # every credential compared (constant time each), none skipped on the first match
    return token is not None and bool(token) and sum(hmac.compare_digest(c.encode(), token) for c in presented) > 0


def not_a_credential() -> ProxyError:
    """The refusal of the admin token on any route but the statistics'."""
    return ProxyError(
        Kind.PERMISSION_DENIED,
        "The admin token is not a client credential: it reads /v1/offload/stats and /v1/offload/sessions only.",
        code="admin_token_not_a_credential",
    )


class AdminGate:
    """ASGI middleware before `CallerGate`: a /v1 request presenting the admin token (in any
    credential header) is answered by the statistics routes as the admin, or refused (403)
    on any other route: the admin token never goes upstream nor names a namespace."""

    def __init__(self, app: ASGIApp, admin_token: str | None, stats: StatsApi) -> None:
        self.app = app
        self.token = admin_token.encode() if admin_token else None
        self.router = ExceptionMiddleware(Router(routes=stats.routes()), handlers={HTTPException: not_routed})

    def _is_admin(self, scope: Scope) -> bool:
        return presents_admin_token(self.token, Headers(scope=scope))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/") and self._is_admin(scope):
            if STATS_PATHS.fullmatch(scope["path"]):
                scope.setdefault("state", {})["admin"] = True
                await self.router(scope, receive, send)
                return
            await response_of(not_a_credential())(scope, receive, send)
            return
        await self.app(scope, receive, send)


STATIC = Path(__file__).parent / "static"
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
ASSETS = ("dashboard.js", "charts.js", "dashboard.css")
# Everything the page loads comes from here; no inline script or style, no frames, no referrer.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def _load(name: str) -> tuple[bytes, str]:
    return (STATIC / name).read_bytes(), TYPES[Path(name).suffix]


class Dashboard:
    """The page and its assets, read once (a fixed set of names: no path reaches the disk)."""

    def __init__(self) -> None:
        self.files = {name: _load(name) for name in ("index.html", *ASSETS)}

    def routes(self) -> list[Route]:
        return [
            Route("/dashboard", self.page, methods=["GET", "HEAD"]),
            Route("/dashboard/{name}", self.asset, methods=["GET", "HEAD"]),
        ]

    def _send(self, name: str) -> Response:
        content, media_type = self.files[name]
        return Response(content, media_type=media_type, headers=SECURITY_HEADERS)

    async def page(self, request: Request) -> Response:
        return self._send("index.html")

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return StarletteJSONResponse(
                {"error": {"message": "Not found.", "type": "invalid_request_error", "code": "not_found"}},
                status_code=404,
                headers=SECURITY_HEADERS,
            )
        return self._send(name)
