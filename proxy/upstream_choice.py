"""Which upstream a request goes to: the server's, a tenant's own, or an allowed per-request one.

The upstream is the server configuration's choice. A tenant may have its own in the tenants
file (`upstream = "https://…/v1"`). A request may name one in `X-Offload-Upstream` only when
its host is on the server's allowlist (empty by default): anything else is a 400, so a client
can never make the proxy send its credentials, or anyone's, to a host of its choosing.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers

from proxy.errors import ProxyError
from proxy.offload_settings import SettingsResolver

HEADER = "x-offload-upstream"


def chosen_base(headers: Headers, resolver: SettingsResolver, allowlist: list[str]) -> str | None:
    """The base URL for this request, or None for the server's default."""
    requested = headers.get(HEADER)
    if requested:
        parts = urlsplit(requested.strip())
        host = (parts.hostname or "").lower()
        hostport = f"{host}:{parts.port}" if parts.port else host
        if parts.scheme not in ("http", "https") or not host:
            raise ProxyError(400, "X-Offload-Upstream must be an http(s) URL.", code="invalid_upstream",
                             param="X-Offload-Upstream")
        allowed = {entry.lower() for entry in allowlist}
        if host not in allowed and hostport not in allowed:
            raise ProxyError(400, f"Upstream host {hostport!r} is not on this server's allowlist.",
                             code="upstream_not_allowed", param="X-Offload-Upstream")
        return requested.strip().rstrip("/")
    tenant_upstream = resolver.tenant_extra(headers.get("x-offload-tenant"), "upstream")
    return str(tenant_upstream).rstrip("/") if tenant_upstream else None
