"""Tenant namespaces: content offloaded under one credential is invisible to every other.

The namespace is a keyed hash of the Authorization credential and the X-Offload-Tenant value;
the raw credential is never stored or logged.
"""

from __future__ import annotations

import hashlib

NAMESPACE_VERSION = b"offload-ns-v1"


def tenant_namespace(authorization: str | None, tenant: str | None) -> str:
    material = b"\0".join(
        [NAMESPACE_VERSION, (authorization or "").strip().encode(), (tenant or "").encode()]
    )
    return hashlib.sha256(material).hexdigest()[:32]


def key(namespace: str, kind: str, name: str) -> str:
    """Store key. `{namespace}` is a Redis Cluster hash tag: one tenant's keys share a slot."""
    return f"off:{{{namespace}}}:{kind}:{name}"
