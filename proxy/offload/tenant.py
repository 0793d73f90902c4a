"""Tenant namespaces: content offloaded under one identity is invisible to every other.

A namespace is a hash of who the caller is (a tenant of the tenants file, a client credential,
or "anonymous") and the optional sub-tenant (`X-Offload-Tenant`); raw credentials are never
stored or logged.
"""

from __future__ import annotations

import hashlib
import hmac
import zlib
from collections.abc import Sequence

NAMESPACE_VERSION = b"offload-ns-v2"
SHARDS = 256  # hash-tag shards per namespace: a large tenant's keys spread over every node of a cluster


def namespace_for(kind: str, identity: Sequence[str], sub_tenant: str | None, *, secret: str | None = None) -> str:
    """`identity`: the tenant name, or the credentials presented (order does not matter).

    With a `secret` (the names key: --namespace-key, else the encryption key) the hash is keyed: key names then reveal nothing that
    could be confirmed by guessing a tenant name or a credential.
    """
    material = b"\0".join(
        [
            NAMESPACE_VERSION,
            kind.encode(),
            *sorted(v.encode("utf-8", "surrogatepass") for v in set(identity)),
            b"\1",
            (sub_tenant or "").encode(),
        ]
    )
    if secret:
        keyed = hashlib.sha256(b"offload-ns-key\0" + secret.encode()).digest()
        return hmac.new(keyed, material, hashlib.sha256).hexdigest()[:32]
    return hashlib.sha256(material).hexdigest()[:32]


def bare_credential(value: str) -> str:
    """A credential without its `Bearer` scheme: `Bearer sk-x`, `bearer  sk-x` and `sk-x` are one."""
    value = value.strip()
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else value


def tenant_namespace(credential: str | None, tenant: str | None) -> str:
    """The namespace of a client credential (a bare key or an `Authorization` value)."""
    value = bare_credential(credential or "")
    return namespace_for("credential", [value] if value else [], tenant)


def key(namespace: str, kind: str, name: str) -> str:
    """Store key `off:{<namespace>:<shard>}:<kind>:<name>`.

    The braces are the Redis Cluster hash tag: the namespace (so the key still names its tenant,
    and no name a client chooses can pick the slot) and a shard, 2 hex digits of a CRC-32 of
    `<kind>:<name>`. A tenant's keys (and the all-tenant statistics, scope `all`, one shard per
    bucket) thus spread over up to 256 slots, i.e. every node; nothing the proxy does needs two
    keys in one slot (no MULTI/EXEC; its Lua scripts, a lease's release and renewal and the
    compare-and-set of a key rotation, read one key;
    its pipelines are non-transactional, a cluster pipeline sends each command to its node). The tag form is the key layout's version: the
    layout before it (`unsharded_key`, one slot per tenant) is read for compaction records only.
    """
    shard = zlib.crc32(f"{kind}:{name}".encode("utf-8", "surrogatepass")) % SHARDS
    return f"off:{{{namespace}:{shard:02x}}}:{kind}:{name}"


def unsharded_key(namespace: str, kind: str, name: str) -> str:
    """A key of the layout before the shards (`off:{<namespace>}:…`): read only where what it
    held cannot be made again (an emulated compaction's record: the client holds just the token)."""
    return f"off:{{{namespace}}}:{kind}:{name}"
