"""Every route's one exception map: the proxy's errors as a status and an API-shaped body.

The idiom of `proxy.upstream.errors`: one table, the most specific row first. A route runs its
work through `answered` and raises what it meets; the table decides what the client gets, in the
shape of the API it speaks (`proxy.errors`). A `ProxyError` is already an answer and goes as it
is; an exception that is in no row is left to the server (it is a bug of another kind).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.responses import Response

from proxy.compact_now import CompactionFailed
from proxy.errors import ProxyError, Shape
from proxy.http.disconnect import ClientDisconnected
from proxy.offload.quota import CredentialRejected, QuotaExceeded
from proxy.store import StoreUnavailable

log = logging.getLogger("proxy.http.managed")  # the name operators' log filters know


@dataclass(frozen=True)
class Row:
    kinds: tuple[type[BaseException], ...]
    status: int
    code: str | None
    text: str  # `{exc}`: the exception's own text; `{name}`: its type's name
    type_: str = "server_error"
    bug: str | None = None  # logged with the traceback: what the proxy should have prevented


# The most specific first: the first row whose exception type matches decides.
ERRORS: tuple[Row, ...] = (
    Row((ClientDisconnected,), 499, None, "Client closed the request.", type_="invalid_request_error"),
    Row((StoreUnavailable,), 503, "store_unavailable", "the proxy's store is unavailable ({exc}); try again."),
    Row((QuotaExceeded,), 429, "storage_quota_exceeded", "{exc}.", type_="invalid_request_error"),
    Row((CredentialRejected,), 401, "invalid_api_key", "{exc}.", type_="invalid_request_error"),
    Row((CompactionFailed,), 502, "compaction_failed", "no summary of this history could be made ({exc})."),
    # e.g. an upstream answer nested too deep to re-encode
    Row(
        (RecursionError, ValueError, UnicodeError),
        502,
        "proxy_error",
        "the proxy could not process this exchange ({name}).",
    ),
    # A bug: the body checks (proxy.formats.*.body) let through a field the proxy reads with a type
    # it does not handle. Logged with its traceback; the client still gets its API's shape.
    Row(
        (TypeError, AttributeError, KeyError, IndexError),
        500,
        "proxy_error",
        "the proxy failed on this request ({name}).",
        bug="request failed on a value of an unexpected type",
    ),
)


def _row(exc: BaseException) -> Row | None:
    return next((row for row in ERRORS if isinstance(exc, row.kinds)), None)


def proxy_error(exc: BaseException, *, doing: str | None = None) -> ProxyError | None:
    """The error the client gets for `exc` (None: in no row). `doing`: what failed, said first
    ("The compaction failed"), else the row's text alone."""
    if isinstance(exc, ProxyError):
        return exc
    row = _row(exc)
    if row is None:
        return None
    text = row.text.format(exc=exc, name=type(exc).__name__)
    message = f"{doing}: {text}" if doing else text[:1].upper() + text[1:]
    return ProxyError(row.status, message, type_=row.type_, code=row.code)


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
        row = _row(exc)
        if row is not None and row.bug:
            log.exception("bug: %s", row.bug)
        elif isinstance(exc, StoreUnavailable) and store_failure_is_a_bug:
            log.exception("bug: the store's failure reached the request")
        elif row is not None and row.status == 502 and row.code == "proxy_error":
            log.warning("request failed: %s: %s", type(exc).__name__, exc)
        return error.response(shape)
