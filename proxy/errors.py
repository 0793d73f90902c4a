"""The proxy's one exception hierarchy: `ProxyError`, the root, carries a `Kind` (what went
wrong), a message, and the field and code that name it. Below the HTTP layer a raise site says
what happened, never an HTTP status: `proxy.http.error_map` alone decides each kind's status and
the body a client gets, in the shape of the API it speaks.

What the formats need to end a stream that has already answered 200 (no status left to decide)
lives here, free of any web framework: the OpenAI-shaped error object (`error_body`) and
Anthropic's stream `error` event (`anthropic_error_event`).
"""

from __future__ import annotations

import enum
from typing import Any, Literal

Shape = Literal["openai", "anthropic"]


class Kind(enum.Enum):
    """What went wrong, as a client is told it (`proxy.http.error_map.STATUSES`: its status)."""

    BAD_REQUEST = "bad_request"  # a body, a field, a header the proxy refuses
    UNAUTHORIZED = "unauthorized"  # no credential, or one the proxy does not know
    CREDENTIAL_REJECTED = "credential_rejected"  # the upstream refuses the caller's credential
    FORBIDDEN = "forbidden"  # what the tenants' shared account may not do
    PERMISSION_DENIED = "permission_denied"  # what this credential may not read
    NOT_FOUND = "not_found"
    TOO_LARGE = "too_large"
    UNSUPPORTED_MEDIA = "unsupported_media"  # a coding or charset the proxy cannot read
    QUOTA_EXCEEDED = "quota_exceeded"  # the tenant's storage quota
    CLIENT_GONE = "client_gone"  # the client closed the request
    BUG = "bug"  # the proxy failed on a value it should have refused or handled
    UNPROCESSABLE = "unprocessable"  # the proxy could not process this exchange
    UPSTREAM_FAILED = "upstream_failed"  # unreachable, or an answer the proxy cannot read
    COMPACTION_FAILED = "compaction_failed"  # no summary of a history could be made
    STORE_UNAVAILABLE = "store_unavailable"
    UPSTREAM_TIMEOUT = "upstream_timeout"


class ProxyError(Exception):
    """The root of the proxy's exceptions: `kind` (what went wrong), `message` (what the client
    is told; a subclass's may be a detail the map words, e.g. StoreUnavailable), `code` and
    `param` (the field it is about). A subclass fixes its kind (and code) as class attributes."""

    kind: Kind = Kind.BUG
    code: str | None = None
    param: str | None = None

    def __init__(self, kind: Kind, message: str, *, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message
        if code is not None:
            self.code = code
        if param is not None:
            self.param = param


class Failure(ProxyError):
    """A subclass whose kind (and code) is its class's, raised as a plain exception is
    (`Failure(text)`): its text a detail, worded for the client by the map."""

    def __init__(self, *args: object) -> None:
        Exception.__init__(self, *args)
        self.message = str(self)


def error_body(message: str, type_: str, code: str | None = None, *, param: str | None = None) -> dict[str, Any]:
    """The OpenAI-shaped error object (a response's body, a stream's error event)."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def stream_error(exc: ProxyError) -> dict[str, Any]:
    """A failure met after the answer began (its 200 long sent), as the OpenAI-shaped error its
    stream ends with: the upstream's or the proxy's fault, `server_error`."""
    return error_body(exc.message, "server_error", exc.code, param=exc.param)


# Anthropic's error types (https://docs.anthropic.com/en/api/errors); by status in proxy.http.error_map
ANTHROPIC_ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "billing_error",
        "permission_error",
        "not_found_error",
        "timeout_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "overloaded_error",
    }
)

# The proxy's own error codes (OpenAI-shaped errors) as Anthropic error types; any other is api_error.
ANTHROPIC_CODES = {"rate_limit_exceeded": "rate_limit_error", "upstream_timeout": "timeout_error"}


def anthropic_error_event(error: Any) -> dict[str, Any]:
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
