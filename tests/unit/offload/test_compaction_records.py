"""Compaction records across the key layout change: a record stored before keys had shards is
still what its token stands for, moved to its sharded key on first use."""

from __future__ import annotations

import json
import uuid

import pytest

from proxy.core import compaction as compaction_token
from proxy.offload.compaction_records import CompactionRecords
from proxy.offload.tenant import key, unsharded_key
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
SECRET = "an encryption key of the tests"
ITEMS = [{"type": "message", "role": "user", "content": "the summary, ref=abc"}]


@pytest.fixture(params=["sqlite", "cluster"])
async def store(request, tmp_path):
    from proxy.store.redis import RedisStore

    s = SQLiteStore(tmp_path) if request.param == "sqlite" else RedisStore(request.getfixturevalue("redis_cluster_url"))
    yield s
    await s.close()


async def stored_before_the_shards(store, namespace: str, sealer: Sealer) -> str:
    """What the proxy did before: the record under `off:{ns}:compaction:<id>`, sealed for that key."""
    content = json.dumps(ITEMS, ensure_ascii=False, separators=(",", ":")).encode()
    record_id = compaction_token.record_id_for(namespace, content)
    old = unsharded_key(namespace, "compaction", record_id.hex())
    assert old == f"off:{{{namespace}}}:compaction:{record_id.hex()}"
    await store.put(old, sealer.seal(content, old), 600)
    return compaction_token.make_token(record_id, namespace, SECRET)


@pytest.mark.parametrize("secret", [None, SECRET])
async def test_a_record_of_the_layout_before_is_read_and_moved(store, secret):
    ns, sealer = uuid.uuid4().hex, Sealer(secret)
    token = await stored_before_the_shards(store, ns, sealer)
    records = CompactionRecords(store, ns, 600, sealer=sealer, secret=SECRET)
    assert await records.load(token) == ITEMS
    record_id = compaction_token.read_token(token, ns, SECRET)
    assert await store.get(unsharded_key(ns, "compaction", record_id)) is None  # moved
    assert await store.get(key(ns, "compaction", record_id)) is not None
    assert await records.load(token) == ITEMS
    assert await records.save(ITEMS) == token  # the same content: the same token, nothing stored twice


async def test_another_tenant_does_not_reach_a_moved_record(store):
    ns = uuid.uuid4().hex
    token = await stored_before_the_shards(store, ns, Sealer(SECRET))
    other = CompactionRecords(store, uuid.uuid4().hex, 600, sealer=Sealer(SECRET), secret=SECRET)
    with pytest.raises(compaction_token.TokenError):
        await other.load(token)
    assert await CompactionRecords(store, ns, 600, sealer=Sealer(SECRET), secret=SECRET).load(token) == ITEMS


async def test_a_record_read_during_a_key_rotation_is_still_read_after_it(store):
    """A token in use keeps its record's TTL alive, so waiting for the old key's values to
    expire never ends for it: a read during the rotation seals it again with the new key."""
    ns = uuid.uuid4().hex
    old_key, new_key = "the old encryption key", "the new encryption key"
    token = await CompactionRecords(store, ns, 600, sealer=Sealer(old_key), secret=SECRET).save(ITEMS)
    rotating = CompactionRecords(store, ns, 600, sealer=Sealer(new_key, previous=old_key), secret=SECRET)
    assert await rotating.load(token) == ITEMS
    after = CompactionRecords(
        store, ns, 600, sealer=Sealer(new_key), secret=SECRET
    )  # --encryption-key-previous dropped
    assert await after.load(token) == ITEMS
    never_read = await CompactionRecords(store, ns, 600, sealer=Sealer(old_key), secret=SECRET).save([{"type": "x"}])
    assert await after.load(never_read) is None  # as the docs say of what the rotation never read
