"""The stores in memory (proxy.store.memory; `MemoryStore` is tested with the others in test_store.py):
the observed sessions a worker holds, one store per session, bounded in bytes and idle time."""

from __future__ import annotations

import pytest

from proxy.store import memory as observed_sessions
from proxy.store.memory import ObservedSessions

pytestmark = pytest.mark.anyio


async def test_a_session_finds_its_store_again_and_tenants_are_apart():
    held = ObservedSessions(max_bytes=10_000)
    store = held.store("t1", "s")
    await store.put("k", b"v" * 100, ttl=60)
    held.measured("t1", "s")
    assert held.store("t1", "s") is store and held.bytes == 101
    assert held.store("t2", "s") is not store  # another tenant's session of the same name
    assert held.store("t1", None) is not held.store("t1", None)  # no session: nothing held
    assert len(held) == 2


async def test_past_the_bytes_the_session_used_longest_ago_goes():
    held = ObservedSessions(max_bytes=1_000)
    for name in ("a", "b", "c"):
        await held.store("t", name).put("k", b"x" * 400, ttl=60)
        held.measured("t", name)
    assert len(held) == 2 and held.bytes <= 1_000
    first = held.store("t", "a")  # "a" was dropped: a new, empty store
    assert await first.get("k") is None
    assert ObservedSessions(max_bytes=0).store("t", "a") is not ObservedSessions(max_bytes=0).store("t", "a")


async def test_an_idle_session_is_forgotten(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(observed_sessions.time, "monotonic", lambda: now[0])
    held = ObservedSessions(max_bytes=10_000)
    store = held.store("t", "s")
    await store.put("k", b"v", ttl=10**6)
    held.measured("t", "s")
    now[0] += observed_sessions.IDLE + 1
    assert held.store("t", "other") is not store and len(held) == 1 and held.bytes == 0
