"""How the upstream's failures become the proxy's own errors: one table, used for a request
that fails before its answer, for a body that breaks off, and for a stream cut midway.

Each names the upstream's host (and port), so a client knows which upstream failed: never its
path, query or userinfo, where a credential could be."""

from __future__ import annotations

import httpx2

from proxy.errors import ProxyError, error_body

# The most specific first: the first row whose exception type matches decides.
UPSTREAM_ERRORS: tuple[tuple[type[Exception], int, str, str], ...] = (
    (httpx2.TimeoutException, 504, "upstream_timeout", "Upstream timed out"),
    (httpx2.TransportError, 502, "upstream_unreachable", "Upstream unreachable"),
    (httpx2.HTTPError, 502, "upstream_error", "Upstream failed"),
)


def _row(exc: Exception) -> tuple[int, str, str]:
    for kind, status, code, text in UPSTREAM_ERRORS:
        if isinstance(exc, kind):
            return status, code, text
    return 502, "upstream_error", "Upstream failed"


def host_of(url: httpx2.URL) -> str:
    """`host`, or `host:port` for a port that is not its scheme's default."""
    return f"{url.host}:{url.port}" if url.port else url.host


def response_host(response: httpx2.Response) -> str | None:
    """The host an upstream response came from (`proxy.upstream.client.Upstream.send` sets its request)."""
    try:
        return host_of(response.request.url)
    except RuntimeError:  # a response made without a request (tests, fakes)
        return None


def _at(host: str | None) -> str:
    return f" at {host}" if host else ""


def upstream_error(exc: Exception, host: str | None = None) -> ProxyError:
    """The error a client gets for an upstream request that failed before its answer."""
    status, code, text = _row(exc)
    return ProxyError(status, f"{text}{_at(host)} ({type(exc).__name__}).", type_="server_error", code=code)


def stream_broke(exc: Exception, host: str | None = None) -> dict:
    """The SSE error event sent when an upstream stream breaks off or times out midway."""
    _, code, _ = _row(exc)
    kind = "upstream_timeout" if code == "upstream_timeout" else "upstream_error"
    return error_body(f"The upstream stream{_at(host)} broke off ({type(exc).__name__}).", "server_error", kind)
