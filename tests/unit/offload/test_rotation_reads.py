"""During a key rotation what the old key sealed is sealed again as it is read (or, for a list
only written to, as it is written): a continued exchange's record, the events, an offloaded
item reloaded. Once the previous key is dropped they still read."""

from __future__ import annotations

import uuid

import pytest

from proxy.core.compaction import Offload
from proxy.offload import events, response_chains
from proxy.offload.refs import RefStore
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
OLD, NEW = "the old encryption key", "the new encryption key"
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
