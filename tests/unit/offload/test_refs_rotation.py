"""An offloaded item in use during an encryption key rotation is still read after it: every
request carrying it extends its TTL, so it never expires while sealed with the old key; the
content a request carries is sealed again with the new key (once per process)."""

from __future__ import annotations

import uuid

import pytest

from proxy.core.compaction import Offload
from proxy.offload.refs import RefStore
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
OLD, NEW = "the old encryption key", "the new encryption key"


class CountingStore(SQLiteStore):
    puts = 0  # writes of a value: put, and the compare-and-set that seals an item again

    async def put(self, key, value, ttl):
        self.puts += 1
        await super().put(key, value, ttl)

    async def replace_if(self, key, expected, value):
        self.puts += 1
        return await super().replace_if(key, expected, value)


@pytest.fixture
async def store(tmp_path):
    s = CountingStore(tmp_path)
    yield s
    await s.close()


async def test_an_item_carried_during_a_rotation_reads_after_it(store):
    ns, item = uuid.uuid4().hex, Offload(f"r{uuid.uuid4().hex[:12]}", "tool_result", "a tool's output " * 50, 100)
    assert await RefStore(store, ns, 600, sealer=Sealer(OLD)).save([item], [item.ref]) == {item.ref}
    rotating = RefStore(store, ns, 600, sealer=Sealer(NEW, previous=OLD))
    before = store.puts
    assert await rotating.save([item], [item.ref]) == set()  # not new: nothing created, nothing charged
    assert store.puts == before + 1  # sealed again with NEW
    assert await rotating.save([item], [item.ref]) == set() and store.puts == before + 1  # once per process
    after = RefStore(store, ns, 600, sealer=Sealer(NEW))  # --encryption-key-previous dropped
    assert (await after.load(item.ref)).text == item.text


async def test_without_a_rotation_an_item_carried_again_is_not_written(store):
    ns, item = uuid.uuid4().hex, Offload(f"r{uuid.uuid4().hex[:12]}", "tool_result", "output " * 50, 100)
    refs = RefStore(store, ns, 600, sealer=Sealer(NEW))
    await refs.save([item], [item.ref])
    before = store.puts
    assert await refs.save([item], [item.ref]) == set() and store.puts == before


async def test_an_item_only_referred_to_during_a_rotation_reads_after_it(store):
    """A placeholder's ref (the request carries no content for it) is read and sealed again."""
    ns, item = uuid.uuid4().hex, Offload(f"r{uuid.uuid4().hex[:12]}", "tool_result", "referred to " * 50, 100)
    await RefStore(store, ns, 600, sealer=Sealer(OLD)).save([item], [item.ref])
    rotating = RefStore(store, ns, 600, sealer=Sealer(NEW, previous=OLD))
    before = store.puts
    assert await rotating.save([], [item.ref]) == set() and store.puts == before + 1
    assert await rotating.save([], [item.ref]) == set() and store.puts == before + 1  # once per process
    assert (await RefStore(store, ns, 600, sealer=Sealer(NEW)).load(item.ref)).text == item.text
