"""Every route's one exception map: the proxy's errors as a status and an API-shaped body; and
the JSON responses the proxy writes itself (`JSONResponse`, `json_answer`).

A raise site below the HTTP layer says what went wrong (a `proxy.errors.Kind`); this module alone
decides what the client gets: `STATUSES`, each kind's status (and OpenAI error type), and the body
in the shape of the API it speaks. OpenAI (chat completions, Responses, every other OpenAI route):
`{"error": {"message", "type", "param", "code"}}`. Anthropic (`/v1/messages…`, or any request
carrying `anthropic-version`): `{"type": "error", "error": {"type", "message"}}`, its `type`
chosen by status as Anthropic does.

A route runs its work through `answered` and raises what it meets. A `ProxyError` goes as it is
(its message is meant for the client); a `Failure` (its text a detail) and the few builtin
exceptions of `BUILTIN` are worded here (`WORDED`, `WORDED_KINDS`); an exception in no row is left
to the server (it is a bug of another kind)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse as _StarletteJSONResponse
from starlette.responses import Response

from proxy.core import jsonio as large_json
from proxy.core.jsonio import dumps
from proxy.errors import Failure, Kind, ProxyError, Shape, error_body
from proxy.http.disconnect import ClientDisconnected
from proxy.offload.cpu_pool import CPU
from proxy.offload.tenant import CredentialRejected, QuotaExceeded
from proxy.store import StoreUnavailable
from proxy.turn import CompactionFailed

log = logging.getLogger("proxy.http.managed")  # the name operators' log filters know


@dataclass(frozen=True)
class Status:
    status: int
    type_: str = "invalid_request_error"  # OpenAI's error type
    code: str | None = None  # the code of an error that names none


# Each kind's status: a kind added to proxy.errors.Kind gets its row here (a test fails without).
STATUSES: dict[Kind, Status] = {
    Kind.BAD_REQUEST: Status(400),
    Kind.UNAUTHORIZED: Status(401),
    Kind.CREDENTIAL_REJECTED: Status(401, code="invalid_api_key"),
    Kind.FORBIDDEN: Status(403),
    Kind.PERMISSION_DENIED: Status(403, "permission_error"),
    Kind.NOT_FOUND: Status(404),
    Kind.TOO_LARGE: Status(413, code="request_too_large"),
    Kind.UNSUPPORTED_MEDIA: Status(415),
    Kind.QUOTA_EXCEEDED: Status(429, code="storage_quota_exceeded"),
    Kind.CLIENT_GONE: Status(499),
    Kind.BUG: Status(500, "server_error", "proxy_error"),
    Kind.UNPROCESSABLE: Status(502, "server_error", "proxy_error"),
    Kind.UPSTREAM_FAILED: Status(502, "server_error", "upstream_error"),
    Kind.COMPACTION_FAILED: Status(502, "server_error", "compaction_failed"),
    Kind.STORE_UNAVAILABLE: Status(503, "server_error", "store_unavailable"),
    Kind.UPSTREAM_TIMEOUT: Status(504, "server_error", "upstream_timeout"),
}

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

# What a client is told of a Failure or a builtin exception (`{exc}`: its text; `{name}`: its
# type's name): by its class, the most specific first, else by its kind, else its text.
WORDED: tuple[tuple[type[BaseException], str], ...] = (
    (ClientDisconnected, "Client closed the request."),
    (StoreUnavailable, "the proxy's store is unavailable ({exc}); try again."),
    (QuotaExceeded, "{exc}."),
    (CredentialRejected, "{exc}."),
    (CompactionFailed, "no summary of this history could be made ({exc})."),
)
WORDED_KINDS: dict[Kind, str] = {
    # e.g. an upstream answer nested too deep to re-encode
    Kind.UNPROCESSABLE: "the proxy could not process this exchange ({name}).",
    # A bug: the body checks (proxy.formats.*.body) let through a field the proxy reads with a type
    # it does not handle. Logged with its traceback; the client still gets its API's shape.
    Kind.BUG: "the proxy failed on this request ({name}).",
}
BUGS = {Kind.BUG: "request failed on a value of an unexpected type"}  # logged with the traceback

# Builtin exceptions a route may meet, as kinds: the first row whose type matches decides.
BUILTIN: tuple[tuple[tuple[type[BaseException], ...], Kind], ...] = (
    ((ClientDisconnected,), Kind.CLIENT_GONE),
    ((RecursionError, ValueError, UnicodeError), Kind.UNPROCESSABLE),
    ((TypeError, AttributeError, KeyError, IndexError), Kind.BUG),
)


def kind_of(exc: BaseException) -> Kind | None:
    """What went wrong (None: an exception in no row)."""
    if isinstance(exc, ProxyError):
        return exc.kind
    return next((kind for types, kind in BUILTIN if isinstance(exc, types)), None)


def status_of(exc: ProxyError) -> int:
    return STATUSES[exc.kind].status


def _worded(exc: BaseException, kind: Kind) -> str | None:
    text = next((text for types, text in WORDED if isinstance(exc, types)), None) or WORDED_KINDS.get(kind)
    return None if text is None else text.format(exc=exc, name=type(exc).__name__)


def proxy_error(exc: BaseException, *, doing: str | None = None) -> ProxyError | None:
    """The error the client gets for `exc` (None: in no row). `doing`: what failed, said first
    ("The compaction failed") of an error worded here, else the wording alone."""
    kind = kind_of(exc)
    if kind is None:
        return None
    if isinstance(exc, ProxyError) and not isinstance(exc, Failure):
        return exc  # its message is the answer
    text = _worded(exc, kind) or str(exc)
    message = f"{doing}: {text}" if doing else text[:1].upper() + text[1:]
    code = exc.code if isinstance(exc, ProxyError) and exc.code is not None else STATUSES[kind].code
    param = exc.param if isinstance(exc, ProxyError) else None
    return ProxyError(kind, message, code=code, param=param)


def body_of(exc: ProxyError) -> dict[str, Any]:
    """`exc` as the OpenAI-shaped error object."""
    row = STATUSES[exc.kind]
    return error_body(exc.message, row.type_, exc.code, param=exc.param)


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    kind = ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_response(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    shape: Shape = "openai",
) -> Response:
    """An error the HTTP layer answers with a status of its own (routing's 404/405, the body's
    408, the admin token's 401, the connection limit's 429), in `shape`."""
    if shape == "anthropic":
        body = anthropic_error_body(status, message)
    else:
        body = error_body(message, type_, code, param=param)
    return Response(json.dumps(body), status_code=status, media_type="application/json")


def response_of(exc: ProxyError, shape: Shape = "openai") -> Response:
    """`exc` as the response a client gets: its kind's status, the body in `shape`."""
    row = STATUSES[exc.kind]
    return error_response(row.status, exc.message, type_=row.type_, code=exc.code, param=exc.param, shape=shape)


async def answered(
    run: Callable[[], Awaitable[Response]],
    *,
    shape: Shape = "openai",
    doing: str | None = None,
    store_failure_is_a_bug: bool = False,
) -> Response:
    """`run()`'s response, or the proxy's own error in `shape` (the API the client speaks).
    `store_failure_is_a_bug`: the route degrades on a failing store in every step (the managed
    turn), so a StoreUnavailable that reaches here is logged as one."""
    try:
        return await run()
    except Exception as exc:  # noqa: BLE001 - mapped by the table, or raised again
        error = proxy_error(exc, doing=doing)
        if error is None:
            raise
        if error is not exc and error.kind in BUGS:
            log.exception("bug: %s", BUGS[error.kind])
        elif isinstance(exc, StoreUnavailable) and store_failure_is_a_bug:
            log.exception("bug: the store's failure reached the request")
        elif error is not exc and error.kind is Kind.UNPROCESSABLE:
            log.warning("request failed: %s: %s", type(exc).__name__, exc)
        return response_of(error, shape)


class JSONResponse(_StarletteJSONResponse):
    """Starlette's JSONResponse, encoded by `jsonio.dumps`: content with a lone surrogate
    (Starlette's own encoder fails on it) goes out escaped, and large bodies are encoded faster."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


async def json_answer(content: Any, *, cpu: CPU) -> Response:
    """A JSONResponse of `content`; written in the CPU pool, a piece at a time
    (`large_json.dumps_yielding`), when `cpu` is large (tens of MB take a good part of a second)."""
    if not cpu.large:
        return JSONResponse(content)
    return Response(await cpu(large_json.dumps_yielding, content), media_type="application/json")
