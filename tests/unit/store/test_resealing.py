"""What the previous key sealed is sealed again as it is read during a rotation, compare-and-set:
two replicas doing it at once, or a writer storing a new value meanwhile, lose nothing."""

from __future__ import annotations

import asyncio

import pytest

from proxy.store import StoreUnavailable, resealing
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from tests.unit.store.test_store import key, store  # noqa: F401  (the fixture: SQLite, Redis, Cluster)

pytestmark = pytest.mark.anyio
OLD, NEW = "the old encryption key", "the new encryption key"
ROTATING = Sealer(NEW, previous=OLD, names=OLD)


async def test_a_value_read_with_the_previous_key_is_sealed_again_with_the_current_one(store):  # noqa: F811
    k = key()
    await store.put(k, Sealer(OLD).seal(b"a summary", k), ttl=60)
    assert await resealing.opened(store, k, await store.get(k), sealer=ROTATING) == b"a summary"
    assert Sealer(NEW).open(await store.get(k), k) == b"a summary"  # readable once OLD is dropped
    current = await store.get(k)
    assert await resealing.opened(store, k, current, sealer=ROTATING) == b"a summary"
    assert await store.get(k) == current  # sealed with the current key already: not written again


async def test_a_value_written_meanwhile_is_not_overwritten(store):  # noqa: F811
    k = key()
    await store.put(k, Sealer(OLD).seal(b"old", k), ttl=60)
    read = await store.get(k)
    await store.put(k, Sealer(NEW).seal(b"newer", k), ttl=60)  # another replica stored a new value
    assert await resealing.opened(store, k, read, sealer=ROTATING) == b"old"  # what was read
    assert Sealer(NEW).open(await store.get(k), k) == b"newer"  # the store keeps the newer


async def test_replicas_sealing_one_value_again_at_once_leave_it_readable(store):  # noqa: F811
    k = key()
    await store.put(k, Sealer(OLD).seal(b"shared", k), ttl=60)
    read = await store.get(k)
    opened = await asyncio.gather(*(resealing.opened(store, k, read, sealer=ROTATING) for _ in range(4)))
    assert opened == [b"shared"] * 4 and Sealer(NEW).open(await store.get(k), k) == b"shared"


async def test_list_items_are_sealed_again_in_place_and_items_pushed_meanwhile_kept(store):  # noqa: F811
    k = key()
    for i in range(3):
        await store.push(k, Sealer(OLD).seal(b"event %d" % i, k), max_len=10, ttl=60)
    read = await store.items(k)
    await store.push(k, Sealer(NEW).seal(b"event 3", k), max_len=10, ttl=60)  # pushed since the read
    assert await resealing.opened_items(store, k, read, sealer=ROTATING) == [b"event 0", b"event 1", b"event 2"]
    assert [Sealer(NEW).open(item, k) for item in await store.items(k)] == [b"event %d" % i for i in range(4)]


async def test_a_list_written_to_is_sealed_again_once_per_process(store):  # noqa: F811
    k = key()
    await store.push(k, Sealer(OLD).seal(b"before", k), max_len=10, ttl=60)
    assert resealing.due(k, ROTATING) and not resealing.due(k, Sealer(NEW))  # only during a rotation
    await resealing.reseal_items(store, k, ROTATING)
    assert [Sealer(NEW).open(item, k) for item in await store.items(k)] == [b"before"]
    assert not resealing.due(k, ROTATING)


class RefusingWrites(SQLiteStore):
    async def replace_if(self, key, expected, value):
        raise StoreUnavailable("down")

    async def replace_items(self, key, replacements):
        raise StoreUnavailable("down")


async def test_a_store_refusing_the_write_back_does_not_fail_the_read(tmp_path):
    store = RefusingWrites(tmp_path)
    try:
        k = key()
        await store.put(k, Sealer(OLD).seal(b"value", k), ttl=60)
        await store.push(k + "l", Sealer(OLD).seal(b"item", k + "l"), max_len=10, ttl=60)
        assert await resealing.opened(store, k, await store.get(k), sealer=ROTATING) == b"value"
        assert await resealing.opened_items(store, k + "l", await store.items(k + "l"), sealer=ROTATING) == [b"item"]
        assert Sealer(NEW).open(await store.get(k), k) is None  # left for a later read
    finally:
        await store.close()
