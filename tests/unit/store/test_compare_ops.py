"""Compare-and-delete and compare-and-extend (a lease's release and renewal), in every store."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.store.test_store import key, store  # noqa: F401  (the fixture: SQLite, Redis, Cluster)

pytestmark = pytest.mark.anyio


async def test_delete_if_deletes_only_the_owners_value(store):  # noqa: F811
    k = key()
    assert await store.put_if_absent(k, b"owner-1", ttl=60)
    assert not await store.delete_if(k, b"owner-2")  # another owner's token: kept
    assert await store.get(k) == b"owner-1"
    assert await store.delete_if(k, b"owner-1")
    assert await store.get(k) is None
    assert not await store.delete_if(k, b"owner-1")  # gone: nothing to delete


async def test_a_lapsed_owner_never_releases_the_next_owners_lease(store):  # noqa: F811
    k = key()
    assert await store.put_if_absent(k, b"first", ttl=1)
    await asyncio.sleep(1.3)  # the first owner's lease lapsed
    assert await store.put_if_absent(k, b"second", ttl=60)
    assert not await store.delete_if(k, b"first") and not await store.extend_if(k, b"first", 60)
    assert await store.get(k) == b"second"


async def test_extend_if_renews_only_the_owners_lease(store):  # noqa: F811
    k = key()
    assert await store.put_if_absent(k, b"owner", ttl=1)
    assert not await store.extend_if(k, b"intruder", 3)
    assert await store.extend_if(k, b"owner", 3)
    await asyncio.sleep(1.3)
    assert await store.get(k) == b"owner"  # renewed past its first expiry
    assert not await store.put_if_absent(k, b"other", ttl=60)


async def test_an_expired_key_is_neither_extended_nor_deleted(store):  # noqa: F811
    k = key()
    await store.put(k, b"owner", ttl=1)
    await asyncio.sleep(1.3)
    assert not await store.extend_if(k, b"owner", 60)
    assert await store.get(k) is None
    assert not await store.delete_if(k, b"owner")


async def test_only_one_of_concurrent_releases_succeeds(store):  # noqa: F811
    k = key()
    await store.put(k, b"owner", ttl=60)
    done = await asyncio.gather(*(store.delete_if(k, b"owner") for _ in range(5)))
    assert sorted(done) == [False, False, False, False, True]


async def test_replace_if_sets_only_over_the_expected_value_and_keeps_the_expiry(store):  # noqa: F811
    k = key()
    await store.put(k, b"read", ttl=2)
    assert not await store.replace_if(k, b"something else", b"new")
    assert await store.get(k) == b"read"
    assert await store.replace_if(k, b"read", b"new")
    assert await store.get(k) == b"new"
    assert not await store.replace_if(k, b"read", b"newer")  # replaced already: the first write stands
    await asyncio.sleep(2.3)
    assert await store.get(k) is None  # its expiry was kept, not renewed nor removed
    assert not await store.replace_if(k, b"new", b"again")  # gone: nothing created
    assert await store.get(k) is None


async def test_of_concurrent_replacements_of_one_value_one_stands(store):  # noqa: F811
    k = key()
    await store.put(k, b"read", ttl=60)
    done = await asyncio.gather(*(store.replace_if(k, b"read", b"new %d" % i) for i in range(5)))
    assert done.count(True) == 1 and await store.get(k) == b"new %d" % done.index(True)


async def test_replace_items_replaces_in_place_and_leaves_the_rest(store):  # noqa: F811
    k = key()
    for value in (b"a", b"b", b"a", b"c"):
        await store.push(k, value, max_len=10, ttl=60)
    assert await store.replace_items(k, {b"a": b"A", b"z": b"Z"}) == 2
    assert await store.items(k) == [b"A", b"b", b"A", b"c"]
    assert await store.replace_items(k, {b"a": b"A"}) == 0  # once: nothing left to replace
    assert await store.replace_items(k, {}) == 0 and await store.replace_items(key(), {b"a": b"A"}) == 0
    assert await store.items(k) == [b"A", b"b", b"A", b"c"]
