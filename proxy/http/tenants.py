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
shown only to the admin and the tenant itself."""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proxy.core.settings import SETTING_FIELDS, OffloadSettings
from proxy.http.routing import Family
from proxy.upstream.base_url import anthropic_base, base_url_problem, openai_base

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
