"""Tenants: the tenants file, and the name a person can tell a credential tenant by.

The tenants file (`--tenants-file`): `[tenants.<id>]` tables (TOML) or a `tenants:` mapping
(YAML), each of setting overrides (`proxy.core.settings.OffloadSettings`, checked by that model)
and of its access: proxy keys, upstreams and their keys. Read and checked here alone, at startup;
`proxy.http.caller` reads the access part, `SettingsResolver` the settings.

A tenant's label, made when its credential is seen (`credential_label`). Where clients send their
own provider keys, a tenant is a hash of its key: the dashboard could only show that hash. Its
label is the key's *fingerprint* instead, the vendor prefix and the last four characters
(`sk-proj…AbCd`), as the providers' own consoles show keys. It reveals at most those: the prefix is
a few lowercase letters and dashes, at most 8 characters (`sk-`, `sk-proj-`, `sk-ant-`), and a key
too short to keep at least `MIN_HIDDEN` characters hidden gets no fingerprint at all (the dashboard
then shows the hash). The label is stored with the statistics (sealed with `--encryption-key`) and
shown only to the admin and the tenant itself.

Who is calling: the credential a request presents decides its namespace, its tenant, its
upstream and the credential that goes upstream.

Three kinds of caller, decided once per request by `Gatekeeper.identify`:

- **proxy key** — a key listed under a tenant's `api_keys` in the tenants file. The key
  decides the tenant; `X-Offload-Tenant` only narrows within it (a sub-tenant). The key never
  leaves the proxy: the upstream gets the tenant's `upstream_api_key`, else the server's
  `--upstream-api-key`, else no credential (on the Anthropic API: `anthropic_api_key`, else
  `--anthropic-api-key`, sent as `x-api-key`).
- **client credential** — with no server key, the client's own `Authorization` / `x-api-key`
  / `api-key` is relayed unchanged and is its namespace (all three headers count).
- **anonymous** — no credential at all; served only with `--allow-anonymous`, and every
  anonymous client shares one namespace.

Each request speaks one provider's API (`proxy.http.routing`): OpenAI's upstream is
`--upstream` (or the tenant's `upstream`), Anthropic's `--anthropic-upstream` (or the tenant's
`anthropic_upstream`).

When the server holds an upstream key (either provider's), anything but a proxy key (or, with
`--allow-anonymous`, nothing) is refused with 401: the operator's key is never used by a
client that did not prove it may."""

from __future__ import annotations

import hashlib
import logging
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.core.settings import SETTING_FIELDS, OffloadSettings
from proxy.errors import Kind as ErrorKind
from proxy.errors import ProxyError
from proxy.http.body import stored_state
from proxy.http.error_map import response_of
from proxy.http.headers import request_headers_for_upstream
from proxy.http.routing import Family, family_of
from proxy.offload.tenant import bare_credential, namespace_for
from proxy.upstream.base_url import HEADER as UPSTREAM_HEADER
from proxy.upstream.base_url import anthropic_base, base_url_problem, openai_base, requested_base

DIGEST_PREFIX = "sha256:"
PLACEHOLDER = "change-me"
MIN_KEY_CHARS = 12
# What a table may hold beside settings: its access (`Tenant`), and the summariser's prompt
# (`summary_prompt`, read by `proxy.http.call_parts`).
TENANT_KEYS = frozenset(
    {"api_keys", "upstream", "upstream_api_key", "anthropic_upstream", "anthropic_api_key", "summary_prompt"}
)
_TENANT_URL = re.compile(r"https?://[^\s?#]+")


def is_placeholder(secret: str | None) -> bool:
    """The example value shipped in deploy/ files: never accepted as a real secret."""
    return bool(secret) and PLACEHOLDER in (secret or "").lower()


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Tenant:
    """A tenant's access: the digests of its proxy keys, its upstreams (with their /v1) and keys."""

    name: str
    key_digests: frozenset[str]
    upstream: str | None
    upstream_api_key: str | None
    anthropic_upstream: str | None = None  # with its /v1
    anthropic_api_key: str | None = None

    def base(self, family: Family) -> str | None:
        return self.anthropic_upstream if family == "anthropic" else self.upstream

    def key(self, family: Family) -> str | None:
        return self.anthropic_api_key if family == "anthropic" else self.upstream_api_key


def load_tenants_file(path: Path | None) -> dict[str, dict[str, Any]]:
    """The file's tables by tenant, every one checked (`check_tenants`); {} without a file."""
    if path is None:
        return {}
    text = path.read_text()
    data: object
    if path.suffix in (".yaml", ".yml"):
        import yaml  # imported only for a YAML tenants file

        data = yaml.safe_load(text) or {}
    else:
        data = tomllib.loads(text)
    tenants = data.get("tenants", data) if isinstance(data, dict) else None
    if not isinstance(tenants, dict) or not all(isinstance(v, dict) for v in tenants.values()):
        raise ValueError("expected one table of settings per tenant, e.g. [tenants.team-a]")
    check_tenants(tenants)
    return tenants


def check_tenants(tenants: Mapping[str, Mapping[str, Any]]) -> None:
    """ValueError naming the tenant for an unknown key or a setting OffloadSettings refuses, then
    for anything unsafe in its access (`tenants_from_config`)."""
    for tenant, overrides in tenants.items():
        unknown = sorted(set(overrides) - set(SETTING_FIELDS) - TENANT_KEYS)
        if unknown:
            raise ValueError(
                f"tenant {tenant!r}: unknown key {', '.join(unknown)} (settings: "
                f"{', '.join(SETTING_FIELDS)}; also {', '.join(sorted(TENANT_KEYS))})"
            )
        try:
            OffloadSettings.model_validate({k: v for k, v in overrides.items() if k in SETTING_FIELDS})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"tenant {tenant!r}: {problems}") from None
    tenants_from_config(tenants)


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
                digest = k[len(DIGEST_PREFIX) :].lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ValueError(f"tenant {name!r}: {DIGEST_PREFIX} keys need 64 hex digits")
            elif len(k) < MIN_KEY_CHARS:
                raise ValueError(f"tenant {name!r}: a proxy key needs at least {MIN_KEY_CHARS} characters")
            else:
                digest = key_digest(k)
            if owner.setdefault(digest, name) != name:
                raise ValueError(f"tenants {owner[digest]!r} and {name!r} share a proxy key")
            digests.add(digest)
        held: dict[str, str | None] = {}
        for field in ("upstream_api_key", "anthropic_api_key"):
            upstream_key = held[field] = entry.get(field)
            if upstream_key is not None and (not isinstance(upstream_key, str) or not digests):
                raise ValueError(f"tenant {name!r}: {field} needs api_keys (else any client could use it)")
            if is_placeholder(upstream_key):
                raise ValueError(f"tenant {name!r}: {field} is the example value {PLACEHOLDER!r}")
        upstream, anthropic = (_tenant_url(name, entry, field) for field in ("upstream", "anthropic_upstream"))
        tenants[name] = Tenant(
            name,
            frozenset(digests),
            openai_base(upstream) if upstream else None,
            held["upstream_api_key"],
            anthropic_base(anthropic) if anthropic else None,
            held["anthropic_api_key"],
        )
    return tenants


def _tenant_url(name: str, entry: Mapping[str, Any], field: str) -> str | None:
    """A tenant's `upstream` / `anthropic_upstream`: an http(s) URL without query or fragment
    (the proxy appends paths to it), or ValueError at startup rather than a failing request."""
    value = entry.get(field)
    if value is None:
        return None
    family = "anthropic" if field == "anthropic_upstream" else "openai"
    if isinstance(value, str) and (problem := base_url_problem(value, family)) is not None:
        raise ValueError(f"tenant {name!r}: {field} {problem}")
    if not isinstance(value, str) or not _TENANT_URL.fullmatch(value):
        raise ValueError(f"tenant {name!r}: {field} must be an http(s) URL without whitespace, query or fragment")
    return value


VENDOR = re.compile(r"[a-z]{2,4}[-_]")  # sk-, gsk_, xai-
PRODUCT = re.compile(r"[a-z]{2,5}[-_]")  # after it: proj-, ant-, admin-
MAX_PREFIX = 8
TAIL = 4
MIN_HIDDEN = 16  # characters of the key neither in the prefix nor in the tail
MAX_SUB = 40  # characters of a sub-tenant (X-Offload-Tenant, the client's string) kept in a label
_printable = re.compile(r"[^\x21-\x7e]")


def key_fingerprint(key: str) -> str | None:
    """`sk-proj…AbCd` (the vendor prefix, if any, and the last 4 characters), or None for a key
    too short to show any of it."""
    prefix = ""
    if (vendor := VENDOR.match(key)) is not None:
        prefix = vendor.group(0)
        product = PRODUCT.match(key, len(prefix))
        if product is not None and len(prefix) + len(product.group(0)) <= MAX_PREFIX:
            prefix += product.group(0)
    if len(key) - len(prefix) - TAIL < MIN_HIDDEN:
        return None
    return f"{prefix.rstrip('-_')}…{_printable.sub('?', key[-TAIL:])}"


def credential_label(credentials: list[str], sub: str | None) -> str | None:
    """The label of a client-credential tenant: its key's fingerprint (the first of several
    keys, `+N` for the others), with the sub-tenant; None when no key has a fingerprint."""
    keys = sorted(set(credentials))
    prints = [p for k in keys if (p := key_fingerprint(k)) is not None]
    if not prints:
        return None
    label = prints[0] + (f" +{len(keys) - 1}" if len(keys) > 1 else "")
    return with_sub(label, sub)


def with_sub(label: str, sub: str | None) -> str:
    """`label/sub` (the sub-tenant clipped), or `label`."""
    return f"{label}/{_clip(sub)}" if sub else label


def _clip(text: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= MAX_SUB else text[: MAX_SUB - 1] + "…"


log = logging.getLogger("proxy.http.caller")

CREDENTIAL_HEADERS = (b"authorization", b"x-api-key", b"api-key")
TENANT_HEADER = "x-offload-tenant"

Kind = Literal["proxy_key", "client", "anonymous"]


def presented_credentials(headers: Headers) -> list[str]:
    """Every credential the request carries, without its `Bearer` scheme."""
    found: list[str] = []
    for name in CREDENTIAL_HEADERS:
        for value in headers.getlist(name.decode()):
            value = bare_credential(value) if name == b"authorization" else value.strip()
            if value:
                found.append(value)
    return found


# What a caller on a shared upstream key (the operator's, used by every tenant) may relay:
# endpoints that keep no state in the upstream account. Files, batches, vector stores, stored
# responses and completions, fine-tunes… would be readable and deletable by every other tenant.
STATELESS_ENDPOINTS = (
    (
        "POST",
        re.compile(
            r"(chat/completions|completions|embeddings|moderations|responses|messages"
            r"|messages/count_tokens|responses/input_tokens|responses/compact|audio/(speech|transcriptions|translations)"
            r"|images/(generations|edits|variations))/?"
        ),
    ),
    ("GET", re.compile(r"models(/[^/]+)?/?")),
)
# Headers that pick an organisation or project of the account the credential belongs to.
ACCOUNT_HEADERS = (b"openai-organization", b"openai-project")


@dataclass(frozen=True)
class Caller:
    """The identity of one request, as far as the proxy is concerned."""

    kind: Kind
    namespace: str  # where its content is stored (tenant or credential, and sub-tenant)
    scope: str  # the namespace of the tenant or credential as a whole: its storage quota
    tenant: str | None  # the tenants-file entry whose settings apply
    base: str | None  # upstream base URL; None = the server's
    upstream_credential: str | None  # replaces the client's credential headers, when set
    shared_key: bool = False  # upstream_credential is the server's, shared by every tenant
    family: Family = "openai"  # the provider API the request speaks: how upstream_credential is sent
    # what the statistics call the namespace (proxy.http.caller): the tenant's name, or its
    # key's fingerprint, with the sub-tenant; None: its hash. Never the credential.
    label: str | None = None

    def upstream_headers(
        self, raw: Iterable[tuple[bytes, bytes]], *, body_replaced: bool = False
    ) -> list[tuple[bytes, bytes]]:
        """The client's headers as they go upstream, with the credential this caller may use."""
        headers = request_headers_for_upstream(raw, body_replaced=body_replaced)
        if self.kind != "client":  # a proxy key, or an empty credential: never relayed
            drop = CREDENTIAL_HEADERS + ACCOUNT_HEADERS if self.upstream_credential else CREDENTIAL_HEADERS
            headers = [(k, v) for k, v in headers if k.lower() not in drop]
        if self.upstream_credential and self.family == "anthropic":
            headers.append((b"x-api-key", self.upstream_credential.encode()))
        elif self.upstream_credential:
            headers.append((b"authorization", f"Bearer {self.upstream_credential}".encode()))
        return headers

    def check_body(self, body: Any) -> None:
        """On a shared upstream key a body may not name state stored upstream (403 otherwise)."""
        if not self.shared_key or (state := stored_state(body)) is None:
            return
        own_key = "anthropic_api_key" if self.family == "anthropic" else "upstream_api_key"
        raise ProxyError(
            ErrorKind.FORBIDDEN,
            f"'{state}' names state kept in the upstream account, which this proxy's tenants "
            "share; send the whole history (store: false) and no stored files, or the operator "
            f"can give this tenant an {own_key} of its own.",
            code="endpoint_not_shared",
            param=state,
        )

    def check_relay(self, method: str, path: str) -> None:
        """On a shared upstream key only stateless endpoints are relayed (403 otherwise)."""
        if not self.shared_key:
            return
        if any(method == m and pattern.fullmatch(path) for m, pattern in STATELESS_ENDPOINTS):
            return
        own_key = "anthropic_api_key" if self.family == "anthropic" else "upstream_api_key"
        raise ProxyError(
            ErrorKind.FORBIDDEN,
            f"{method} /v1/{path} keeps state in the upstream account, which this proxy's "
            f"tenants share; the operator can give this tenant an {own_key} of its own.",
            code="endpoint_not_shared",
        )


def unauthorized(message: str, code: str) -> ProxyError:
    return ProxyError(ErrorKind.UNAUTHORIZED, message, code=code)


class Gatekeeper:
    """Decides the Caller of each request from its credential headers and the tenants file.

    `secret` (the names key: --namespace-key, else the encryption key, when set) keys the
    namespace hashes, so that someone who reads the store cannot confirm a guessed tenant,
    credential or content from key names.
    """

    def __init__(
        self,
        tenants: Mapping[str, Mapping[str, Any]],
        *,
        server_key: str | None,
        allow_anonymous: bool,
        upstream_allowlist: list[str],
        secret: str | None = None,
        anthropic_key: str | None = None,
        anthropic_upstream: str = "https://api.anthropic.com",
    ) -> None:
        self.tenants = tenants_from_config(tenants)
        self.by_digest = {d: t for t in self.tenants.values() for d in t.key_digests}
        self.keys: dict[Family, str | None] = {"openai": server_key, "anthropic": anthropic_key}
        self.server_key = server_key or anthropic_key  # either held key puts the proxy in proxy-key mode
        self.allow_anonymous, self.allowlist = allow_anonymous, upstream_allowlist
        self.anthropic_base = anthropic_base(anthropic_upstream)
        self.secret = secret
        for option, key in (("--upstream-api-key", server_key), ("--anthropic-api-key", anthropic_key)):
            if is_placeholder(key):
                raise ValueError(f"{option} is the example value {PLACEHOLDER!r}")

    def startup_notes(self) -> list[str]:
        notes = []
        if self.allow_anonymous:
            notes.append(
                "--allow-anonymous: requests without a credential are served, and every anonymous "
                "client shares one namespace (they can read each other's offloaded content)"
            )
        if self.server_key and not self.by_digest and not self.allow_anonymous:
            notes.append(
                "an operator key (--upstream-api-key or --anthropic-api-key) is set but the tenants file "
                "lists no api_keys: every request will be refused (401) until proxy keys are configured"
            )
        return notes

    def _proxy_key_tenant(self, credentials: list[str]) -> Tenant | None:
        """Looked up by SHA-256 digest: the lookup's timing tells nothing about the keys."""
        for credential in credentials:
            if (tenant := self.by_digest.get(key_digest(credential))) is not None:
                return tenant
        return None

    def _namespaces(self, kind: str, identity: list[str], sub: str | None) -> tuple[str, str]:
        """(the namespace, the scope of its quota: the same without the sub-tenant)."""
        scope = namespace_for(kind, identity, None, secret=self.secret)
        return (namespace_for(kind, identity, sub, secret=self.secret) if sub else scope), scope

    def _default_base(self, family: Family) -> str | None:
        """The server's upstream for `family` (None: `--upstream`, which the upstream client knows)."""
        return self.anthropic_base if family == "anthropic" else None

    def _requested_base(self, headers: Headers, family: Family) -> str | None:
        requested = requested_base(headers, self.allowlist, family)
        if not requested:
            return None
        return anthropic_base(requested) if family == "anthropic" else openai_base(requested)

    def identify(self, headers: Headers, family: Family = "openai") -> Caller:
        """Raises ProxyError 401 (no or wrong credential), 403 or 400 (a bad X-Offload-* header)."""
        credentials = presented_credentials(headers)
        sub = headers.get(TENANT_HEADER, "").strip() or None
        tenant = self._proxy_key_tenant(credentials)
        held = self.keys[family]
        if tenant is not None:
            self._no_requested_upstream(headers)
            namespace, scope = self._namespaces("tenant", [tenant.name], sub)
            own = tenant.key(family)
            return Caller(
                "proxy_key",
                namespace,
                scope,
                tenant.name,
                tenant.base(family) or self._default_base(family),
                own or held,
                shared_key=not own,
                family=family,
                label=with_sub(tenant.name, sub),
            )
        if self.server_key and credentials:
            raise unauthorized(
                "Invalid proxy key: this proxy accepts only the keys its operator issued "
                "(Authorization: Bearer <proxy key>, or x-api-key).",
                "invalid_api_key",
            )
        if not credentials:
            if not self.allow_anonymous:
                wanted = "a proxy key issued by the operator" if self.server_key else "your provider API key"
                raise unauthorized(
                    f"This proxy needs a credential: send Authorization: Bearer <key> (or x-api-key) with {wanted}.",
                    "missing_api_key",
                )
            if self.server_key:
                self._no_requested_upstream(headers)
            namespace, scope = self._namespaces("anonymous", [], sub)
            return Caller(
                "anonymous",
                namespace,
                scope,
                None,
                self._requested_base(headers, family) or self._default_base(family),
                held,
                shared_key=bool(held),
                family=family,
                label=with_sub("anonymous", sub),
            )
        named = self.tenants.get(sub or "")
        if named is not None and named.key_digests:
            raise ProxyError(
                ErrorKind.FORBIDDEN,
                "X-Offload-Tenant names a tenant that is reachable only with its own proxy key.",
                code="tenant_requires_key",
                param="X-Offload-Tenant",
            )
        namespace, scope = self._namespaces("credential", credentials, sub)
        base = self._requested_base(headers, family) or (named.base(family) if named else None)
        return Caller(
            "client",
            namespace,
            scope,
            sub,
            base or self._default_base(family),
            None,
            family=family,
            label=credential_label(credentials, sub),
        )

    @staticmethod
    def _no_requested_upstream(headers: Headers) -> None:
        """A credential the proxy holds goes only where its configuration says."""
        if headers.get(UPSTREAM_HEADER):
            raise ProxyError(
                ErrorKind.BAD_REQUEST,
                "X-Offload-Upstream is only for clients that send their own provider key; "
                "with a proxy key the upstream comes from the tenants file.",
                code="upstream_not_allowed",
                param="X-Offload-Upstream",
            )


class CallerGate:
    """ASGI middleware: every request under /v1 is identified before any route runs.

    The Caller is put in `scope["state"]["caller"]` (`request.state.caller` in a route);
    a request that may not pass gets its 401/403/400 here.
    """

    def __init__(self, app: ASGIApp, gatekeeper: Gatekeeper) -> None:
        self.app, self.gatekeeper = app, gatekeeper

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (scope["path"] == "/v1" or scope["path"].startswith("/v1/")):
            family = family_of(scope)
            try:
                caller = self.gatekeeper.identify(Headers(scope=scope), family)
            except ProxyError as exc:
                await response_of(exc, family)(scope, receive, send)
                return
            scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)
