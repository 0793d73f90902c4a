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
