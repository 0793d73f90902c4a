"""The proxy's own errors, in the shape of the API the client speaks.

OpenAI (chat completions, Responses, every other OpenAI route): `{"error": {"message", "type",
"param", "code"}}`. Anthropic (`/v1/messages…`, or any request carrying `anthropic-version`):
`{"type": "error", "error": {"type", "message"}}`, its `type` chosen by status as Anthropic does.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from starlette.responses import Response

Shape = Literal["openai", "anthropic"]

# Anthropic's error types by HTTP status (https://docs.anthropic.com/en/api/errors)
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    499: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_body(message: str, type_: str, code: str | None = None, *, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def anthropic_error_body(status: int, message: str) -> dict:
    kind = ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


# The proxy's own error codes (OpenAI-shaped errors) as Anthropic error types; any other is api_error.
ANTHROPIC_CODES = {"rate_limit_exceeded": "rate_limit_error", "upstream_timeout": "timeout_error"}


ANTHROPIC_ERROR_TYPES = frozenset(ANTHROPIC_TYPES.values()) | {"api_error"}


def anthropic_error_event(error: Any) -> dict:
    """An error body as Anthropic's stream `error` event: an Anthropic body (a relayed upstream
    error) keeps its own type; an OpenAI-shaped one (`error_body`, the proxy's own) gets the type
    of its code (`ANTHROPIC_CODES`), else api_error. A relayed stream that breaks off and a
    reload round that fails say the same."""
    error = error if isinstance(error, dict) else {}
    detail = error.get("error") if isinstance(error.get("error"), dict) else {}
    if error.get("type") == "error" and detail.get("type") in ANTHROPIC_ERROR_TYPES:
        kind = detail["type"]
    else:
        code = detail.get("code")
        kind = ANTHROPIC_CODES.get(code, "api_error") if isinstance(code, str) else "api_error"
    return {"type": "error", "error": {"type": kind, "message": str(detail.get("message") or "The request failed.")}}


def error_response(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    shape: Shape = "openai",
) -> Response:
    if shape == "anthropic":
        body = anthropic_error_body(status, message)
    else:
        body = error_body(message, type_, code, param=param)
    return Response(json.dumps(body), status_code=status, media_type="application/json")


class ProxyError(Exception):
    """An error the proxy itself answers with (not one relayed from upstream)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type_, code, param

    def response(self, shape: Shape = "openai") -> Response:
        return error_response(self.status, self.message, type_=self.type, code=self.code, param=self.param, shape=shape)

    def body(self) -> dict:
        return error_body(self.message, self.type, self.code, param=self.param)
