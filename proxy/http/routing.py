"""Routing: one spelling of each path, which provider's API a request speaks, and routing's own
errors.

One spelling of each path before routing (`CanonicalPath`): `/v1//messages`, `/v1/responses/` and
`/v1/chat//completions/` reach the managed endpoints (and their checks) like `/v1/messages`, never
the relay behind them. Only the decoded `path` that routing, the API family and the metrics read is
rewritten: runs of slashes become one and a trailing slash goes. `raw_path`, which the relay
forwards, stays as the client sent it. An API path without its `/v1` (`/chat/completions`,
`/responses`, `/messages`, `/models`…: a client configured with the proxy's root as its base URL,
as other OpenAI-compatible gateways allow) is the same path with it: routed, identified and managed
as `/v1/…`. The proxy's own paths (`/healthz`, `/readyz`, `/metrics`, `/dashboard`) are not API
paths and stay.

The API family (`family_of`) decides the upstream, how a held key is sent, and the shape of the
proxy's own errors. Anthropic: the Messages API's paths (`/v1/messages`,
`/v1/messages/count_tokens`, `/v1/messages/batches…`) and any request carrying `anthropic-version`
(every Anthropic SDK and Claude Code send it, e.g. on `/v1/models`). Everything else is OpenAI's.

Routing's own errors (`not_routed`), 404 (no such path) and 405 (not with this method), as the
proxy's errors: JSON in the shape of the API the client speaks (`proxy.errors`), never Starlette's
plain-text pages."""

from __future__ import annotations

import re
from typing import Literal

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.http.error_map import error_response

_SLASHES = re.compile(r"//+")
# The first segments of OpenAI's and Anthropic's API paths (under /v1)
API_SEGMENTS = frozenset(
    {
        "chat",
        "completions",
        "responses",
        "messages",
        "models",
        "embeddings",
        "moderations",
        "audio",
        "images",
        "files",
        "uploads",
        "batches",
        "fine_tuning",
        "vector_stores",
        "assistants",
        "threads",
        "conversations",
        "realtime",
        "evals",
        "containers",
    }
)


def canonical(path: str) -> str:
    if "//" in path:
        path = _SLASHES.sub("/", path)
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    if path.partition("/")[2].partition("/")[0] in API_SEGMENTS:  # `/messages/x` → `messages`
        path = f"/v1{path}"
    return path


class CanonicalPath:
    """ASGI middleware: `scope["path"]` in its one spelling (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            path = scope.get("path", "")
            fixed = canonical(path)
            if fixed != path:
                scope = {**scope, "path": fixed}
        await self.app(scope, receive, send)


Family = Literal["openai", "anthropic"]


def family_of(scope: Scope) -> Family:
    path = scope.get("path", "")
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return "anthropic"
    if any(name == b"anthropic-version" for name, _ in scope.get("headers", ())):
        return "anthropic"
    return "openai"


NOT_FOUND = (
    "No such path on this proxy: the OpenAI and Anthropic APIs are under /v1 (POST /v1/chat/completions, "
    "/v1/responses, /v1/messages, GET /v1/models…; also without /v1), and its own pages are /healthz, "
    "/readyz, /metrics and /dashboard."
)


async def not_routed(request: Request, exc: Exception) -> Response:
    """Routing's own 404 (no such path) and 405 (not with this method) as the proxy's errors, in
    the shape of the API the client speaks (`proxy.errors`), with 405's Allow header."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        message, code = NOT_FOUND, "not_found"
    elif status == 405:
        message, code = f"{request.method} is not allowed on this path.", "method_not_allowed"
    else:
        message, code = str(getattr(exc, "detail", "")) or "The request failed.", "http_error"
    response = error_response(status, message, code=code, shape=family_of(request.scope))
    response.headers.update(getattr(exc, "headers", None) or {})
    return response
