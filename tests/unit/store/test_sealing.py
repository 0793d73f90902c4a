"""Sealing at rest: the current key seals, the previous one still opens; names keyed apart. What
the previous key sealed is sealed again as it is read during a rotation, compare-and-set: two
replicas doing it at once, or a writer storing a new value meanwhile, lose nothing."""

from __future__ import annotations

import asyncio

import pytest

from proxy.config import ServerSettings
from proxy.store import StoreUnavailable, sealer_for
from proxy.store import sealing as resealing
from proxy.store.sealing import MAGIC, Sealer
from proxy.store.sqlite import SQLiteStore
from tests.unit.store.test_store import key, store  # noqa: F401  (the fixture: SQLite, Redis, Cluster)

pytestmark = pytest.mark.anyio
OLD, NEW = "the old encryption key", "the new encryption key"


def test_values_sealed_with_the_previous_key_still_open_and_new_ones_use_the_current():
    before = Sealer(OLD).seal(b"content", "off:{k}:item:r")
    rotating = Sealer(NEW, previous=OLD, names=OLD)
    assert rotating.opened(before, "off:{k}:item:r") == (b"content", "previous")
    after = rotating.seal(b"content", "off:{k}:item:r")
    assert after.startswith(MAGIC) and Sealer(NEW).open(after, "off:{k}:item:r") == b"content"
    assert Sealer(OLD).open(after, "off:{k}:item:r") is None  # new values: the new key only
    assert rotating.opened(after, "off:{k}:item:r") == (b"content", "current")
    assert rotating.open(before, "off:{other}:item:r") is None  # the store key still binds the value
    assert Sealer(NEW).open(before, "off:{k}:item:r") is None  # once the previous key is dropped
    assert Sealer(None).opened(b"plain", "k") == (b"plain", "plain")
    assert Sealer(None).opened(before, "k") == (None, None)


def test_names_stay_put_when_the_sealing_key_rotates():
    assert Sealer(NEW, names=OLD).key_name("session-1", "ns") == Sealer(OLD).key_name("session-1", "ns")
    assert Sealer(NEW).key_name("session-1", "ns") != Sealer(OLD).key_name("session-1", "ns")
    assert Sealer(None).key_name("session-1", "ns") == "session-1"


def test_the_settings_give_the_rotation_sealer_and_a_names_key_that_does_not_move(tmp_path):
    plain = ServerSettings(data_dir=tmp_path, encryption_key=OLD)
    rotating = ServerSettings(data_dir=tmp_path, encryption_key=NEW, encryption_key_previous=OLD, namespace_key=OLD)
    assert plain.names_key == rotating.names_key == OLD
    assert sealer_for(rotating).open(sealer_for(plain).seal(b"x", "k"), "k") == b"x"
    assert sealer_for(rotating).key_name("s", "ns") == sealer_for(plain).key_name("s", "ns")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"encryption_key_previous": OLD}, "needs --encryption-key"),
        ({"encryption_key": NEW, "encryption_key_previous": OLD}, "--namespace-key"),
        ({"encryption_key": NEW, "encryption_key_previous": "change-me"}, "example value"),
        ({"encryption_key": NEW, "encryption_key_previous": NEW, "namespace_key": OLD}, "is --encryption-key itself"),
    ],
)
def test_a_rotation_without_what_it_needs_is_refused(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        ServerSettings(data_dir=tmp_path, **options)


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
