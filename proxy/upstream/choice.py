"""Which upstream a request goes to: the server's, a tenant's own, or an allowed per-request one.

The upstream is the server configuration's choice. A tenant may have its own in the tenants
file (`upstream = "https://…/v1"`). A request may name one in `X-Offload-Upstream` only when
its host is on the server's allowlist (empty by default): anything else is a 400, so a client
can never make the proxy send its credentials, or anyone's, to a host of its choosing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

import httpx2

from proxy.core.settings import UPSTREAM_HEADER
from proxy.errors import Kind, ProxyError
from proxy.upstream.base_url import base_url_problem

PARAM = UPSTREAM_HEADER
HEADER = PARAM.lower()


def has_dot_segment(path: str) -> bool:
    """A `.` or `..` segment, also percent-encoded any number of times, behind an encoded slash
    or a backslash, or with `;params`: such a path could leave the prefix it is appended to."""
    decoded = path
    while "%" in decoded and (once := unquote(decoded)) != decoded:  # shrinks every round: ends
        decoded = once
    return any(segment.split(";", 1)[0] in (".", "..") for segment in re.split(r"[/\\]", decoded))


def _invalid(why: str) -> ProxyError:
    return ProxyError(
        Kind.BAD_REQUEST,
        f"X-Offload-Upstream must be an http(s) URL such as https://host/v1: {why}.",
        code="invalid_upstream",
        param=PARAM,
    )


def parse_upstream_url(value: str) -> httpx2.URL:
    """A strict parse: any whitespace or control character, a bad port or a bad host is refused."""
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in value):
        raise _invalid("it contains whitespace or a control character")
    try:
        url = httpx2.URL(value)
        port = url.port
    except (httpx2.InvalidURL, ValueError, TypeError) as exc:
        raise _invalid(str(exc) or "it does not parse") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise _invalid("it needs an http or https scheme and a host")
    if url.userinfo or url.query or url.fragment:
        raise _invalid("it may not carry credentials, a query or a fragment")
    if port is not None and not 0 < port < 65536:
        raise _invalid("its port is out of range")
    if has_dot_segment(urlsplit(value).path):  # as written: httpx2 would already have resolved them
        raise _invalid("its path may not contain '.' or '..' segments")
    return url


def requested_base(headers: Mapping[str, str], allowlist: list[str], family: str = "openai") -> str | None:
    """The base URL an `X-Offload-Upstream` header asks for (allowlisted hosts only), else None;
    `family`: whose API it is the base of (an endpoint's URL is refused)."""
    requested = (headers.get(HEADER) or "").strip()
    if not requested:
        return None
    url = parse_upstream_url(requested)
    if (problem := base_url_problem(requested, family)) is not None:
        raise _invalid(problem)
    host = url.host.lower()
    # "host" allows the scheme's default port only; "host:port" exactly that port
    hostport = f"{host}:{url.port}" if url.port else host
    allowed = {entry.lower() for entry in allowlist}
    if hostport not in allowed:
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"Upstream host {hostport!r} is not on this server's allowlist.",
            code="upstream_not_allowed",
            param=PARAM,
        )
    return requested.rstrip("/")
