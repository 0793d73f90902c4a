"""Who is calling: the credential a request presents decides its namespace, its tenant, its
upstream and the credential that goes upstream.

Three kinds of caller, decided once per request by `Gatekeeper.identify`:

- **proxy key** — a key listed under a tenant's `api_keys` in the tenants file. The key
  decides the tenant; `X-Offload-Tenant` only narrows within it (a sub-tenant). The key never
  leaves the proxy: the upstream gets the tenant's `upstream_api_key`, else the server's
  `--upstream-api-key`, else no credential.
- **client credential** — with no server key, the client's own `Authorization` / `x-api-key`
  / `api-key` is relayed unchanged and is its namespace (all three headers count).
- **anonymous** — no credential at all; served only with `--allow-anonymous`, and every
  anonymous client shares one namespace.

When the server holds an upstream key, anything but a proxy key (or, with
`--allow-anonymous`, nothing) is refused with 401: the operator's key is never used by a
client that did not prove it may.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.errors import ProxyError
from proxy.headers import request_headers_for_upstream
from proxy.tenant import namespace_for
from proxy.upstream_choice import requested_base

log = logging.getLogger("proxy.caller")

CREDENTIAL_HEADERS = (b"authorization", b"x-api-key", b"api-key")
TENANT_HEADER = "x-offload-tenant"
DIGEST_PREFIX = "sha256:"
PLACEHOLDER = "change-me"
MIN_KEY_CHARS = 12

Kind = Literal["proxy_key", "client", "anonymous"]


def is_placeholder(secret: str | None) -> bool:
    """The example value shipped in deploy/ files: never accepted as a real secret."""
    return bool(secret) and PLACEHOLDER in secret.lower()


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def presented_credentials(headers: Headers) -> list[str]:
    """Every credential the request carries, without its `Bearer` scheme."""
    found: list[str] = []
    for name in CREDENTIAL_HEADERS:
        for value in headers.getlist(name.decode()):
            value = value.strip()
            scheme, _, token = value.partition(" ")
            if name == b"authorization" and scheme.lower() == "bearer":
                value = token.strip()
            if value:
                found.append(value)
    return found


@dataclass(frozen=True)
class Tenant:
    name: str
    key_digests: frozenset[str]
    upstream: str | None
    upstream_api_key: str | None


def tenants_from_config(config: Mapping[str, Mapping[str, Any]]) -> dict[str, Tenant]:
    """The access part of the tenants file; raises ValueError for anything unsafe."""
    tenants: dict[str, Tenant] = {}
    owner: dict[str, str] = {}
    for name, entry in config.items():
        keys = entry.get("api_keys", [])
        if not isinstance(keys, list) or not all(isinstance(k, str) and k.strip() for k in keys):
            raise ValueError(f"tenant {name!r}: api_keys must be a list of non-empty strings")
        digests = set()
        for k in keys:
            if is_placeholder(k):
                raise ValueError(f"tenant {name!r}: an api_keys entry is the example value {PLACEHOLDER!r}")
            if k.startswith(DIGEST_PREFIX):
                digest = k[len(DIGEST_PREFIX):].lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ValueError(f"tenant {name!r}: {DIGEST_PREFIX} keys need 64 hex digits")
            elif len(k) < MIN_KEY_CHARS:
                raise ValueError(f"tenant {name!r}: a proxy key needs at least {MIN_KEY_CHARS} characters")
            else:
                digest = key_digest(k)
            if owner.setdefault(digest, name) != name:
                raise ValueError(f"tenants {owner[digest]!r} and {name!r} share a proxy key")
            digests.add(digest)
        upstream_key = entry.get("upstream_api_key")
        if upstream_key is not None and (not isinstance(upstream_key, str) or not digests):
            raise ValueError(f"tenant {name!r}: upstream_api_key needs api_keys (else any client could use it)")
        if is_placeholder(upstream_key):
            raise ValueError(f"tenant {name!r}: upstream_api_key is the example value {PLACEHOLDER!r}")
        upstream = entry.get("upstream")
        tenants[name] = Tenant(name, frozenset(digests), str(upstream).rstrip("/") if upstream else None,
                               upstream_key)
    return tenants


@dataclass(frozen=True)
class Caller:
    """The identity of one request, as far as the proxy is concerned."""

    kind: Kind
    namespace: str
    tenant: str | None  # the tenants-file entry whose settings apply
    base: str | None  # upstream base URL; None = the server's
    upstream_credential: str | None  # replaces the client's credential headers, when set
    strip_credentials: bool  # the client's credential headers stay here (a proxy key)

    def upstream_headers(self, raw: Iterable[tuple[bytes, bytes]], *, body_replaced: bool = False
                         ) -> list[tuple[bytes, bytes]]:
        """The client's headers as they go upstream, with the credential this caller may use."""
        headers = request_headers_for_upstream(raw, body_replaced=body_replaced)
        if self.strip_credentials:
            headers = [(k, v) for k, v in headers if k.lower() not in CREDENTIAL_HEADERS]
        if self.upstream_credential:
            headers.append((b"authorization", f"Bearer {self.upstream_credential}".encode()))
        return headers


def unauthorized(message: str, code: str) -> ProxyError:
    return ProxyError(401, message, code=code)


class Gatekeeper:
    """Decides the Caller of each request from its credential headers and the tenants file."""

    def __init__(self, tenants: Mapping[str, Mapping[str, Any]], *, server_key: str | None,
                 allow_anonymous: bool, upstream_allowlist: list[str]) -> None:
        self.tenants = tenants_from_config(tenants)
        self.by_digest = {d: t for t in self.tenants.values() for d in t.key_digests}
        self.server_key, self.allow_anonymous, self.allowlist = server_key, allow_anonymous, upstream_allowlist
        if is_placeholder(server_key):
            raise ValueError(f"--upstream-api-key is the example value {PLACEHOLDER!r}")

    def startup_notes(self) -> list[str]:
        notes = []
        if self.allow_anonymous:
            notes.append("--allow-anonymous: requests without a credential are served, and every anonymous "
                         "client shares one namespace (they can read each other's offloaded content)")
        if self.server_key and not self.by_digest and not self.allow_anonymous:
            notes.append("--upstream-api-key is set but the tenants file lists no api_keys: every request "
                         "will be refused (401) until proxy keys are configured")
        return notes

    def _proxy_key_tenant(self, credentials: list[str]) -> Tenant | None:
        """Looked up by SHA-256 digest: the lookup's timing tells nothing about the keys."""
        for credential in credentials:
            if (tenant := self.by_digest.get(key_digest(credential))) is not None:
                return tenant
        return None

    def identify(self, headers: Headers) -> Caller:
        """Raises ProxyError 401 (no or wrong credential), 403 or 400 (a bad X-Offload-* header)."""
        credentials = presented_credentials(headers)
        sub = headers.get(TENANT_HEADER, "").strip() or None
        tenant = self._proxy_key_tenant(credentials)
        if tenant is not None:
            return Caller("proxy_key", namespace_for("tenant", [tenant.name], sub), tenant.name,
                          requested_base(headers, self.allowlist) or tenant.upstream,
                          tenant.upstream_api_key or self.server_key, True)
        if self.server_key and credentials:
            raise unauthorized("Invalid proxy key: this proxy accepts only the keys its operator issued "
                               "(Authorization: Bearer <proxy key>, or x-api-key).", "invalid_api_key")
        if not credentials:
            if not self.allow_anonymous:
                raise unauthorized("This proxy needs a credential: send Authorization: Bearer <key> (or x-api-key): "
                                   "your provider key, or a proxy key issued by the operator.", "missing_api_key")
            return Caller("anonymous", namespace_for("anonymous", [], sub), None, requested_base(headers, self.allowlist),
                          self.server_key, False)
        named = self.tenants.get(sub or "")
        if named is not None and named.key_digests:
            raise ProxyError(403, "X-Offload-Tenant names a tenant that is reachable only with its own proxy key.",
                             code="tenant_requires_key", param="X-Offload-Tenant")
        return Caller("client", namespace_for("credential", credentials, sub), sub,
                      requested_base(headers, self.allowlist) or (named.upstream if named else None), None, False)


class CallerGate:
    """ASGI middleware: every request under /v1 is identified before any route runs.

    The Caller is put in `scope["state"]["caller"]` (`request.state.caller` in a route);
    a request that may not pass gets its 401/403/400 here.
    """

    def __init__(self, app: ASGIApp, gatekeeper: Gatekeeper) -> None:
        self.app, self.gatekeeper = app, gatekeeper

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (scope["path"] == "/v1" or scope["path"].startswith("/v1/")):
            try:
                caller = self.gatekeeper.identify(Headers(scope=scope))
            except ProxyError as exc:
                await exc.response()(scope, receive, send)
                return
            scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)
