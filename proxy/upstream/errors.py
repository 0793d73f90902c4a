"""How the upstream's failures become the proxy's own errors: one table, used for a request
that fails before its answer, for a body that breaks off, and for a stream cut midway.

Each names the upstream's host (and port), so a client knows which upstream failed: never its
path, query or userinfo, where a credential could be."""

from __future__ import annotations

from typing import Any

import httpx2

from proxy.errors import Kind, ProxyError, error_body


class UpstreamError(ProxyError):
    """The upstream failed the proxy: unreachable, timed out, or an answer it cannot read."""


# The most specific first: the first row whose exception type matches decides.
UPSTREAM_ERRORS: tuple[tuple[type[Exception], Kind, str, str], ...] = (
    (httpx2.TimeoutException, Kind.UPSTREAM_TIMEOUT, "upstream_timeout", "Upstream timed out"),
    (httpx2.TransportError, Kind.UPSTREAM_FAILED, "upstream_unreachable", "Upstream unreachable"),
    (httpx2.HTTPError, Kind.UPSTREAM_FAILED, "upstream_error", "Upstream failed"),
)


def _row(exc: Exception) -> tuple[Kind, str, str]:
    for type_, kind, code, text in UPSTREAM_ERRORS:
        if isinstance(exc, type_):
            return kind, code, text
    return Kind.UPSTREAM_FAILED, "upstream_error", "Upstream failed"


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


def upstream_error(exc: Exception, host: str | None = None) -> UpstreamError:
    """The error a client gets for an upstream request that failed before its answer."""
    kind, code, text = _row(exc)
    return UpstreamError(kind, f"{text}{_at(host)} ({type(exc).__name__}).", code=code)


def stream_broke(exc: Exception, host: str | None = None) -> dict[str, Any]:
    """The SSE error event sent when an upstream stream breaks off or times out midway."""
    _, code, _ = _row(exc)
    kind = "upstream_timeout" if code == "upstream_timeout" else "upstream_error"
    return error_body(f"The upstream stream{_at(host)} broke off ({type(exc).__name__}).", "server_error", kind)
