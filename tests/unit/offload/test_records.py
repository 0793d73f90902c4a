"""The records a namespace keeps (proxy.offload.records): compaction records across the key layout
change (a record stored before keys had shards is still what its token stands for, moved to its
sharded key on first use); records and offloaded items come back exactly as they went in (a lone
surrogate included, sealed or not; a large one written and read in the CPU pool); and during an
encryption key rotation what the old key sealed is sealed again as it is read (or, for a list
only written to, as it is written): an offloaded item in use (every request carrying it extends
its TTL, the content it carries sealed again once per process), a continued exchange's record,
the events. Once the previous key is dropped they still read.
"""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from proxy.core import compaction as compaction_token
from proxy.core.compaction import Offload
from proxy.offload import records as events
from proxy.offload import records as response_chains
from proxy.offload.cpu_pool import LARGE_CHARS
from proxy.offload.records import CompactionRecords, RefStore
from proxy.offload.tenant import key, unsharded_key
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
OLD, NEW = "the old encryption key", "the new encryption key"
SECRET = "an encryption key of the tests"
ITEMS = [{"type": "message", "role": "user", "content": "the summary, ref=abc"}]


@pytest.fixture(params=["sqlite", "cluster"])
async def store_or_cluster(request, tmp_path):
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
async def test_a_record_of_the_layout_before_is_read_and_moved(store_or_cluster, secret):
    ns, sealer = uuid.uuid4().hex, Sealer(secret)
    token = await stored_before_the_shards(store_or_cluster, ns, sealer)
    records = CompactionRecords(store_or_cluster, ns, 600, sealer=sealer, secret=SECRET)
    assert await records.load(token) == ITEMS
    record_id = compaction_token.read_token(token, ns, SECRET)
    assert await store_or_cluster.get(unsharded_key(ns, "compaction", record_id)) is None  # moved
    assert await store_or_cluster.get(key(ns, "compaction", record_id)) is not None
    assert await records.load(token) == ITEMS
    assert await records.save(ITEMS) == token  # the same content: the same token, nothing stored twice


async def test_another_tenant_does_not_reach_a_moved_record(store_or_cluster):
    ns = uuid.uuid4().hex
    token = await stored_before_the_shards(store_or_cluster, ns, Sealer(SECRET))
    other = CompactionRecords(store_or_cluster, uuid.uuid4().hex, 600, sealer=Sealer(SECRET), secret=SECRET)
    with pytest.raises(compaction_token.TokenError):
        await other.load(token)
    assert await CompactionRecords(store_or_cluster, ns, 600, sealer=Sealer(SECRET), secret=SECRET).load(token) == ITEMS


async def test_a_record_read_during_a_key_rotation_is_still_read_after_it(store_or_cluster):
    """A token in use keeps its record's TTL alive, so waiting for the old key's values to
    expire never ends for it: a read during the rotation seals it again with the new key."""
    ns = uuid.uuid4().hex
    old_key, new_key = "the old encryption key", "the new encryption key"
    token = await CompactionRecords(store_or_cluster, ns, 600, sealer=Sealer(old_key), secret=SECRET).save(ITEMS)
    rotating = CompactionRecords(store_or_cluster, ns, 600, sealer=Sealer(new_key, previous=old_key), secret=SECRET)
    assert await rotating.load(token) == ITEMS
    after = CompactionRecords(
        store_or_cluster, ns, 600, sealer=Sealer(new_key), secret=SECRET
    )  # --encryption-key-previous dropped
    assert await after.load(token) == ITEMS
    never_read = await CompactionRecords(store_or_cluster, ns, 600, sealer=Sealer(old_key), secret=SECRET).save(
        [{"type": "x"}]
    )
    assert await after.load(never_read) is None  # as the docs say of what the rotation never read


LONE = "\ud83d"


@pytest.mark.parametrize("secret", [None, "correct horse"])
@pytest.mark.parametrize("size", [10, LARGE_CHARS + 10])
async def test_a_record_reads_back_exactly(tmp_path, secret, size, monkeypatch):
    threads: set[str] = set()

    def spy_seal(self, value, store_key, real=Sealer.seal):
        threads.add(threading.current_thread().name)
        return real(self, value, store_key)

    monkeypatch.setattr(Sealer, "seal", spy_seal)
    store = SQLiteStore(tmp_path)
    records = CompactionRecords(store, "n" * 32, 60, sealer=Sealer(secret), secret=secret)
    items = [
        {"role": "user", "content": f"fix {LONE} " + "x" * size},
        {"role": "assistant", "content": f"\udc00 é 😀 {LONE}"},
        {"n": 2**70, "f": 1.5},
    ]
    token = await records.save(items)
    assert await records.save(items) == token  # the same items, the same token
    assert await records.load(token) == items
    here = threading.current_thread().name
    assert (
        threads == ({here} if size < LARGE_CHARS else {t for t in threads if t.startswith("offload-cpu")}) and threads
    )
    await store.close()


async def test_a_large_offloaded_item_is_opened_off_the_loop_and_reads_back_exactly(tmp_path, monkeypatch):
    from proxy.core.compaction import Offload
    from proxy.offload import records as refs_module
    from proxy.offload.records import RefStore

    threads: list[str] = []
    real = refs_module.decode_item

    def spy(ref, plain):
        threads.append(threading.current_thread().name)
        return real(ref, plain)

    monkeypatch.setattr(refs_module, "decode_item", spy)
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, 60, sealer=Sealer("k"))
    small, large = f"fix {LONE} é", "".join(f"{i} {LONE}\n" for i in range(200_000))  # hard to compress
    await refs.save(
        [Offload("rsmall", "tool_result", small, 3), Offload("rlarge", "tool_result", large, 9)], ["rsmall", "rlarge"]
    )
    assert (await refs.load("rsmall")).text == small and (await refs.load("rlarge")).text == large
    assert threads[0] == threading.current_thread().name and threads[1].startswith("offload-cpu")
    await store.close()


class CountingStore(SQLiteStore):
    puts = 0  # writes of a value: put, and the compare-and-set that seals an item again

    async def put(self, key, value, ttl):
        self.puts += 1
        await super().put(key, value, ttl)

    async def replace_if(self, key, expected, value):
        self.puts += 1
        return await super().replace_if(key, expected, value)


@pytest.fixture
async def counting_store(tmp_path):
    s = CountingStore(tmp_path)
    yield s
    await s.close()


async def test_an_item_carried_during_a_rotation_reads_after_it(counting_store):
    ns, item = uuid.uuid4().hex, Offload(f"r{uuid.uuid4().hex[:12]}", "tool_result", "a tool's output " * 50, 100)
    assert await RefStore(counting_store, ns, 600, sealer=Sealer(OLD)).save([item], [item.ref]) == {item.ref}
    rotating = RefStore(counting_store, ns, 600, sealer=Sealer(NEW, previous=OLD))
    before = counting_store.puts
    assert await rotating.save([item], [item.ref]) == set()  # not new: nothing created, nothing charged
    assert counting_store.puts == before + 1  # sealed again with NEW
    assert await rotating.save([item], [item.ref]) == set() and counting_store.puts == before + 1  # once per process
    after = RefStore(counting_store, ns, 600, sealer=Sealer(NEW))  # --encryption-key-previous dropped
    assert (await after.load(item.ref)).text == item.text


async def test_without_a_rotation_an_item_carried_again_is_not_written(counting_store):
    ns, item = uuid.uuid4().hex, Offload(f"r{uuid.uuid4().hex[:12]}", "tool_result", "output " * 50, 100)
    refs = RefStore(counting_store, ns, 600, sealer=Sealer(NEW))
    await refs.save([item], [item.ref])
    before = counting_store.puts
    assert await refs.save([item], [item.ref]) == set() and counting_store.puts == before


async def test_an_item_only_referred_to_during_a_rotation_reads_after_it(counting_store):
    """A placeholder's ref (the request carries no content for it) is read and sealed again."""
    ns, item = uuid.uuid4().hex, Offload(f"r{uuid.uuid4().hex[:12]}", "tool_result", "referred to " * 50, 100)
    await RefStore(counting_store, ns, 600, sealer=Sealer(OLD)).save([item], [item.ref])
    rotating = RefStore(counting_store, ns, 600, sealer=Sealer(NEW, previous=OLD))
    before = counting_store.puts
    assert await rotating.save([], [item.ref]) == set() and counting_store.puts == before + 1
    assert await rotating.save([], [item.ref]) == set() and counting_store.puts == before + 1  # once per process
    assert (await RefStore(counting_store, ns, 600, sealer=Sealer(NEW)).load(item.ref)).text == item.text


BEFORE, ROTATING, AFTER = Sealer(OLD), Sealer(NEW, previous=OLD, names=OLD), Sealer(NEW, names=OLD)


@pytest.fixture(params=["sqlite", "redis"])
async def store(request, tmp_path):
    from proxy.store.redis import RedisStore

    s = SQLiteStore(tmp_path) if request.param == "sqlite" else RedisStore(request.getfixturevalue("redis_url"))
    yield s
    await s.close()


async def test_a_continued_exchange_read_during_the_rotation_reads_after_it(store):
    ns, name = uuid.uuid4().hex, f"resp_{uuid.uuid4().hex}"
    kept = response_chains.Continuation("resp_last", [{"type": "function_call_output", "call_id": "c", "output": "x"}])
    await response_chains.remember(store, ns, name, continuation=kept, ttl=600, sealer=BEFORE)
    assert await response_chains.resolve(store, ns, name, ttl=600, sealer=ROTATING) == kept
    assert await response_chains.resolve(store, ns, name, ttl=600, sealer=AFTER) == kept


async def test_events_listed_during_the_rotation_list_after_it(store):
    ns, session = uuid.uuid4().hex, f"s-{uuid.uuid4().hex}"
    await events.record(store, ns, session, events=[events.event("compression", messages=3)], ttl=600, sealer=BEFORE)
    assert [e["type"] for e in await events.recent(store, ns, session, sealer=ROTATING)] == ["compression"]
    assert [e["type"] for e in await events.recent(store, ns, session, sealer=AFTER)] == ["compression"]


async def test_events_recorded_before_the_rotation_are_sealed_again_by_the_next_recorded(store):
    """A session's events list is extended by every event: nobody need list it for the old ones to stay."""
    ns, session = uuid.uuid4().hex, f"s-{uuid.uuid4().hex}"
    await events.record(store, ns, session, events=[events.event("compression")], ttl=600, sealer=BEFORE)
    await events.record(store, ns, session, events=[events.event("reload")], ttl=600, sealer=ROTATING)
    assert [e["type"] for e in await events.recent(store, ns, session, sealer=AFTER)] == ["compression", "reload"]


async def test_an_item_reloaded_during_the_rotation_reads_after_it(store):
    ns, item = uuid.uuid4().hex, Offload(f"r{uuid.uuid4().hex[:12]}", "tool_result", "reloaded " * 40, 80)
    await RefStore(store, ns, 600, sealer=BEFORE).save([item], [item.ref])
    assert (await RefStore(store, ns, 600, sealer=ROTATING).load(item.ref)).text == item.text
    assert (await RefStore(store, ns, 600, sealer=AFTER).load(item.ref)).text == item.text
