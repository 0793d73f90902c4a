"""Tenant namespaces and store keys."""

from __future__ import annotations

from redis.crc import key_slot

from proxy.offload.tenant import key, tenant_namespace


def test_namespace_depends_on_credential_and_tenant_and_hides_both():
    a = tenant_namespace("Bearer sk-a", None)
    assert a == tenant_namespace("Bearer sk-a", None)
    assert len({a, tenant_namespace("Bearer sk-b", None), tenant_namespace("Bearer sk-a", "team")}) == 3
    assert "sk-a" not in a and len(a) == 32


def test_all_keys_of_a_tenant_share_one_cluster_slot():
    ns = tenant_namespace("Bearer sk-a", "t")
    keys = [key(ns, kind, name) for kind, name in
            [("item", "r1"), ("item", "r2"), ("session", "s"), ("events", "-"), ("summary", "h:v"), ("lock", "h"),
             ("conv", "c")]]
    assert len({key_slot(k.encode()) for k in keys}) == 1
    other = key(tenant_namespace("Bearer sk-b", None), "item", "r1")
    assert other != keys[0] and other.startswith(f"off:{{{tenant_namespace('Bearer sk-b', None)}}}:")
