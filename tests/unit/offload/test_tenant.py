"""Tenant namespaces and store keys; how a tenant's keys spread over a real Redis Cluster; and the
credential check, the caller gate's admission, settled by the step about to store (each part's
own account opens its section)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import pytest
from redis.crc import key_slot

from proxy.core.compaction import Offload
from proxy.offload import records as events
from proxy.offload.records import RefStore
from proxy.offload.tenant import (
    ADMITTED,
    SHARDS,
    Admission,
    CredentialCheck,
    CredentialRejected,
    Quota,
    key,
    tenant_namespace,
)
from proxy.stats._counters import ALL, DAY, PriceTable, Turn, bucket_key, bucket_start, top_key
from proxy.stats._recorder import Recorder
from proxy.store.memory import MemoryStore
from proxy.store.redis import RedisStore
from proxy.store.sealing import Sealer

# Tenant namespaces and store keys; how a tenant's keys spread over a real Redis Cluster.


def test_namespace_depends_on_credential_and_tenant_and_hides_both():
    a = tenant_namespace("Bearer sk-a", None)
    assert a == tenant_namespace("Bearer sk-a", None)
    assert len({a, tenant_namespace("Bearer sk-b", None), tenant_namespace("Bearer sk-a", "team")}) == 3
    assert "sk-a" not in a and len(a) == 32


def test_a_tenants_keys_carry_its_namespace_in_their_hash_tag_and_spread_over_slots():
    ns = tenant_namespace("Bearer sk-a", "t")
    keys = [key(ns, "item", f"r{i}") for i in range(2000)]
    assert all(k.startswith(f"off:{{{ns}:") and k.index("}") == len("off:{") + 32 + 3 for k in keys)
    assert len({key_slot(k.encode()) for k in keys}) == SHARDS  # every shard used
    assert key(ns, "item", "r1") == key(ns, "item", "r1")  # stable: a replica finds what another wrote
    other = tenant_namespace("Bearer sk-b", None)
    assert key(other, "item", "r1") != key(ns, "item", "r1") and f"{{{other}:" in key(other, "item", "r1")


def test_a_name_a_client_chooses_cannot_move_the_hash_tag():
    ns = "a" * 32
    chosen = key(ns, "session", "{x}")
    tag = chosen[len("off:{") : chosen.index("}")]  # Redis hashes the first {…}: the proxy's
    assert tag.startswith(ns) and key_slot(chosen.encode()) == key_slot(tag.encode()) != key_slot(b"x")


@pytest.mark.parametrize("days", [0, *range(-400, 400, 7)])
def test_all_tenant_statistics_of_a_day_spread_over_slots(days):
    """Any day's (CRC-32 is linear: the spread of a day's keys depends on its date; on some days
    they fall in 164 of the 256 shards, none ever more than 25 of 1,488 keys in one slot)."""
    day = bucket_start(time.time(), "d") + 86400 * days
    keys = (
        [bucket_key(ALL, "m", day + 60 * i) for i in range(1440)]
        + [bucket_key(ALL, "h", day + 3600 * i) for i in range(24)]
        + [top_key("h", day + 3600 * i) for i in range(24)]
    )
    slots = Counter(key_slot(k.encode()) for k in keys)
    assert len(slots) >= 128 and max(slots.values()) < 0.02 * len(keys)


def masters(url: str) -> list:
    import redis
    from redis.cluster import RedisCluster

    cluster = RedisCluster.from_url(url.replace("+cluster://", "://", 1))
    try:
        return [redis.Redis(host=n.host, port=n.port) for n in cluster.get_primaries()]
    finally:
        cluster.close()


@pytest.mark.anyio
async def test_a_large_tenant_spreads_over_every_master_of_a_real_cluster(redis_cluster_url):
    """One tenant with many sessions and refs, events and statistics: no master holds most of it."""
    ns = uuid.uuid4().hex
    store = RedisStore(redis_cluster_url)
    recorder = Recorder(PriceTable(), retention=DAY)
    try:
        refs = RefStore(store, ns, ttl=600)
        for s in range(20):
            offloads = [Offload(f"ref{s}-{i}", "tool_result", f"content {s} {i}", 3) for i in range(15)]
            # a turn's save touches every ref of its history at once: one pipeline over many nodes
            assert len(await refs.save(offloads, [o.ref for o in offloads], session=f"session-{s}")) == 15
            assert await refs.save(offloads, [o.ref for o in offloads], session=f"session-{s}") == set()
            await events.record(
                store, ns, f"session-{s}", events=[events.event("compaction")], ttl=600, sealer=Sealer(None)
            )
        recorder.start(store, Sealer(None))
        now = time.time()
        for s in range(20):
            recorder.record(
                Turn(
                    namespace=ns,
                    session=f"session-{s}",
                    time=now,
                    route="chat",
                    model="gpt-4o",
                    status=200,
                    stream=False,
                    tokens_before=1000,
                    tokens_after=400,
                    action="compact",
                )
            )
        assert await recorder.flush() == 20
        assert (await refs.load("ref7-3")).text == "content 7 3"
        assert await refs.session_refs("session-4") == {f"ref4-{i}" for i in range(15)}
    finally:
        await recorder.stop()
        await store.close()
    nodes = masters(redis_cluster_url)
    try:
        per_master = [sum(1 for _ in node.scan_iter(match=f"off:{{{ns}:*", count=1000)) for node in nodes]
    finally:
        for node in nodes:
            node.close()
    total = sum(per_master)
    print(f"\n{total} keys of one tenant per master: {per_master}")
    assert len(per_master) == 3 and total >= 300 + 20 + 20 + 20  # items, session sets, events, stats
    assert all(n <= 0.6 * total for n in per_master) and all(n > 0 for n in per_master)


# The credential check is the caller gate's admission, settled by the step about to store, never
# made by a store write: an invented key stores nothing, a known-good key is asked once, a
# request that stores nothing asks nothing.


def _refs(store: MemoryStore, admission: Admission) -> RefStore:
    return RefStore(store, "ns", 600, quota=Quota(store, "scope", limit=0, ttl=600, admission=admission))


def _offload(text: str) -> Offload:
    return Offload(f"ref-{len(text)}", "tool", text, 10)


def _asking(status: int | None) -> tuple[Admission, list[int]]:
    asked: list[int] = []

    async def ask() -> int | None:
        asked.append(1)
        return status

    return Admission(CredentialCheck(), "scope", ask), asked


def test_an_invented_key_stores_nothing():
    async def run() -> None:
        store = MemoryStore()
        admission, asked = _asking(401)
        refs = _refs(store, admission)
        await refs.admit()
        with pytest.raises(CredentialRejected):
            await refs.save([_offload("x" * 50)], [])
        assert asked == [1]
        assert (await refs.load("ref-50")) is None
        await refs.admit()  # the refusal is remembered: not asked again
        assert asked == [1]

    asyncio.run(run())


def test_a_known_good_key_is_asked_once():
    async def run() -> None:
        store = MemoryStore()
        admission, asked = _asking(200)
        refs = _refs(store, admission)
        for text in ("a" * 40, "b" * 60):
            await refs.admit()
            assert await refs.save([_offload(text)], []) == {f"ref-{len(text)}"}
        assert asked == [1]

    asyncio.run(run())


def test_a_request_storing_nothing_asks_nothing():
    async def run() -> None:
        admission, asked = _asking(200)
        refs = _refs(MemoryStore(), admission)
        assert await refs.save([], []) == set()
        assert asked == []

    asyncio.run(run())


def test_a_write_not_admitted_first_is_refused_without_asking():
    async def run() -> None:
        admission, asked = _asking(200)
        with pytest.raises(CredentialRejected):  # the store handle never asks the upstream itself
            await _refs(MemoryStore(), admission).save([_offload("c" * 30)], [])
        assert asked == []

    asyncio.run(run())


def test_an_unanswered_ask_admits_nothing_and_is_asked_again():
    async def run() -> None:
        admission, asked = _asking(None)
        assert not await admission.settle() and not admission.admitted
        assert not await admission.settle() and asked == [1, 1]

    asyncio.run(run())


def test_a_caller_the_proxy_vouches_for_is_admitted_without_a_check():
    async def run() -> None:
        assert ADMITTED.admitted and await ADMITTED.settle()
        assert await _refs(MemoryStore(), ADMITTED).save([_offload("d" * 20)], []) == {"ref-20"}

    asyncio.run(run())
