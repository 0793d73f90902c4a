"""Routing's own errors, 404 (no such path) and 405 (not with this method), as the proxy's
errors: JSON in the shape of the API the client speaks (`proxy.errors`, `proxy.http.family`),
never Starlette's plain-text pages."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from proxy.http.error_map import error_response
from proxy.http.family import family_of

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
