"""One contract, two stores: the embedded SQLite store and a real Redis."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as redis

from proxy.store import redis as redis_store
from proxy.store.memory import MemoryStore
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "redis", "cluster", "memory"])
async def store(request, tmp_path):
    if request.param == "sqlite":
        s = SQLiteStore(tmp_path)
    elif request.param == "memory":
        s = MemoryStore()
    elif request.param == "redis":
        s = RedisStore(request.getfixturevalue("redis_url"))
    else:
        s = RedisStore(request.getfixturevalue("redis_cluster_url"))
    yield s
    await s.close()


def key() -> str:
    return f"off:{{{uuid.uuid4().hex}}}:test"  # hash-tagged like the proxy's own keys


async def test_put_get_delete(store):
    k = key()
    assert await store.get(k) is None
    await store.put(k, b"\x00binary\xffvalue", ttl=60)
    assert await store.get(k) == b"\x00binary\xffvalue"
    await store.delete(k)
    assert await store.get(k) is None


async def test_put_overwrites(store):
    k = key()
    await store.put(k, b"one", ttl=60)
    await store.put(k, b"two", ttl=60)
    assert await store.get(k) == b"two"


async def test_idle_ttl_expires_and_touch_extends(store):
    k, other = key(), key()
    await store.put(k, b"v", ttl=1)
    assert await store.touch([k, other], ttl=3) == [True, False]
    await asyncio.sleep(1.3)
    assert await store.get(k) == b"v"  # touched: still there past its first TTL
    await store.put(other, b"w", ttl=1)
    await asyncio.sleep(1.3)
    assert await store.get(other) is None
    assert await store.touch([other], ttl=60) == [False]


async def test_get_with_ttl_extends(store):
    k = key()
    await store.put(k, b"v", ttl=1)
    assert await store.get(k, ttl=3) == b"v"
    await asyncio.sleep(1.3)
    assert await store.get(k) == b"v"


async def test_put_if_absent_is_a_lock(store):
    k = key()
    results = await asyncio.gather(*(store.put_if_absent(k, b"x", ttl=60) for _ in range(5)))
    assert sorted(results) == [False, False, False, False, True]
    await store.delete(k)
    assert await store.put_if_absent(k, b"y", ttl=60)


async def test_sets_and_capped_lists(store):
    s, lst = key(), key()
    assert await store.members(s) == set()
    await store.add_members(s, ["a", "b"], ttl=60)
    await store.add_members(s, ["b", "c"], ttl=60)
    assert await store.members(s) == {"a", "b", "c"}
    for i in range(5):
        await store.push(lst, str(i).encode(), max_len=3, ttl=60)
    assert await store.items(lst) == [b"2", b"3", b"4"]


async def test_counters_are_atomic_and_expire(store):
    k = key()
    results = await asyncio.gather(*(store.incr(k, 10, ttl=60) for _ in range(20)))
    assert sorted(results) == list(range(10, 201, 10))
    assert await store.incr(k, -50, ttl=60) == 150
    assert await store.get(k) == b"150"  # a value like any other: bytes
    short = key()
    assert await store.incr(short, 7, ttl=1) == 7
    await asyncio.sleep(2.1)
    assert await store.incr(short, 1, ttl=60) == 1  # expired: counted from 0 again


async def test_touch_with_slack_asks_every_time_and_writes_expiries_rarely(store):
    fresh, due, gone = key(), key(), key()
    for k in (fresh, due, gone):
        await store.put(k, b"v", ttl=2)
    # 2 s left > ttl - slack = 1 s: existence is reported, the expiry is not rewritten
    assert await store.touch([fresh, due, gone], ttl=3, slack=2) == [True, True, True]
    await store.delete(gone)
    assert await store.touch([gone, fresh], ttl=3, slack=2) == [False, True]  # never assumed from before
    await asyncio.sleep(1.3)
    assert await store.touch([due], ttl=3, slack=2) == [True]  # 0.7 s left < 1 s: extended to 3 s
    await asyncio.sleep(1.0)
    assert await store.get(fresh) is None  # its expiry was left alone
    assert await store.get(due) == b"v"
    assert await store.touch([fresh, due], ttl=3) == [False, True]  # no slack: always extended


async def test_touch_of_many_keys_answers_each_in_order(store, monkeypatch):
    """More keys than one batch (a script call on a single Redis): each key's answer in its place."""
    monkeypatch.setattr(redis_store, "EACH_KEYS", 3)
    keys = [key() for _ in range(10)]
    stored = keys[::3] + keys[1::3]  # 0, 3, 6, 9, 1, 4, 7: every batch holds missing and live keys
    for k in stored:
        await store.put(k, b"v", ttl=1)
    expected = [k in stored for k in keys]
    assert await store.touch(keys, ttl=60, slack=30) == expected  # 1 s left < 60 - 30: extended
    assert await store.touch(keys, ttl=60, slack=30) == expected  # read only
    await asyncio.sleep(1.3)
    assert [await store.get(k) for k in keys] == [b"v" if ok else None for ok in expected]
    assert await store.touch(keys, ttl=60) == expected


async def test_touch_of_many_keys_is_one_command_on_a_single_redis(redis_url):
    """What Redis receives from the client for a touch of many keys: one script call (its PTTLs and
    EXPIREs run inside it), not a command per key (issue 42: 2.3 ms of client CPU for 237 keys)."""
    s = RedisStore(redis_url)
    watcher = redis.from_url(redis_url)
    mark = uuid.uuid4().hex  # in every key of this test: other clients' commands (a shared REDIS_URL) are not counted
    keys = [f"off:{{{mark}:{i}}}:test" for i in range(50)]
    try:
        for k in keys[:40]:
            await s.put(k, b"v", ttl=5)
        async with watcher.monitor() as monitor:
            seen: list[tuple[str, str]] = []

            async def watch() -> None:
                while True:
                    info = await monitor.next_command()
                    if mark in info["command"]:
                        seen.append((info["client_type"], info["command"].split()[0].upper()))

            watching = asyncio.ensure_future(watch())
            await asyncio.sleep(0.2)
            assert await s.touch(keys, ttl=60, slack=30) == [True] * 40 + [False] * 10  # read, then extend
            assert await s.touch(keys, ttl=60, slack=30) == [True] * 40 + [False] * 10  # read only
            await s.get(f"off:{{{mark}}}:end")  # the last command: all of the above were seen once it is
            for _ in range(100):
                if ("tcp", "GET") in seen:
                    break
                await asyncio.sleep(0.02)
            watching.cancel()
        sent = [command for client, command in seen if client != "lua"]
        assert sent == ["EVAL", "EVAL", "EVAL", "GET"]
        assert sorted({command for client, command in seen if client == "lua"}) == ["EXPIRE", "PTTL"]
    finally:
        await watcher.aclose()
        await s.close()


async def test_add_members_with_slack_adds_what_is_missing(store):
    s = key()
    await store.add_members(s, ["a", "b"], ttl=60, slack=30)
    await store.add_members(s, ["b", "c"], ttl=60, slack=30)
    await store.add_members(s, ["a", "b", "c"], ttl=60, slack=30)  # nothing to write
    assert await store.members(s) == {"a", "b", "c"}
    await store.delete(s)
    await store.add_members(s, ["a"], ttl=60, slack=30)
    assert await store.members(s) == {"a"}
    short = key()
    await store.add_members(short, ["x"], ttl=1, slack=0)
    await store.add_members(short, ["x"], ttl=3, slack=1)  # 1 s left < 3 - 1: expiry due
    await asyncio.sleep(1.3)
    assert await store.members(short) == {"x"}


async def test_ping(store):
    assert await store.ping()


async def test_sqlite_shared_between_processes_like_instances(tmp_path):
    """Two store instances on one file (as two worker processes would be) see each other's writes."""
    a, b = SQLiteStore(tmp_path), SQLiteStore(tmp_path)
    await a.put("k", b"from-a", ttl=60)
    assert await b.get("k") == b"from-a"
    await a.close()
    await b.close()
    c = SQLiteStore(tmp_path)  # a restart keeps the data
    assert await c.get("k") == b"from-a"
    await c.close()


async def test_redis_unreachable_raises_store_unavailable():
    from proxy.store.base import StoreUnavailable
    from tests.harness.servers import free_port

    s = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    with pytest.raises(StoreUnavailable):
        await s.get("x")
    assert not await s.ping()
    await s.close()


async def test_hash_counters_add_atomically_keep_ints_and_expire(store):
    k, missing = key(), key()
    await asyncio.gather(
        *(store.incr_fields(k, {"requests": 1, "tokens": 100, "usd": 0.25}, ttl=60) for _ in range(20))
    )
    await store.incr_fields(k, {"requests": -5, "action:compact": 2}, ttl=60)
    await store.incr_fields(k, {}, ttl=60)  # nothing to add: nothing written
    [fields, empty] = await store.hashes([k, missing])
    assert fields == {"requests": 15, "tokens": 2000, "usd": pytest.approx(5.0), "action:compact": 2}
    assert isinstance(fields["requests"], int) and isinstance(fields["tokens"], int)
    assert empty == {}
    assert await store.hashes([]) == []
    short = key()
    await store.incr_fields(short, {"n": 3}, ttl=1)
    await asyncio.sleep(2.1)
    assert await store.hashes([short]) == [{}]
    await store.incr_fields(short, {"n": 1}, ttl=60)  # expired: counted from 0 again
    assert await store.hashes([short]) == [{"n": 1}]
    await store.delete(short)
    assert await store.hashes([short]) == [{}]


async def test_hash_fields_set_overwrite_or_keep_the_first_and_mix_with_counters(store):
    k = key()
    await store.incr_fields(k, {"turns": 2}, ttl=60)
    await store.set_fields(k, {"last": 10.5, "finish": 3}, ttl=60)
    await store.set_fields(k, {"last": 12.25, "finish": 1}, ttl=60)  # overwritten
    await asyncio.gather(
        *(store.set_fields(k, {"first": float(i), "turns": 99}, ttl=60, only_new=True) for i in range(5))
    )  # the first writer's stays; a field already held is kept
    await store.set_fields(k, {}, ttl=60)
    [fields] = await store.hashes([k])
    assert fields["last"] == pytest.approx(12.25) and fields["finish"] == 1 and fields["turns"] == 2
    assert fields["first"] in {float(i) for i in range(5)}
    assert set(fields) == {"turns", "last", "finish", "first"}
    short = key()
    await store.set_fields(short, {"a": 1}, ttl=1)
    await asyncio.sleep(2.1)
    await store.set_fields(short, {"b": 2}, ttl=60, only_new=True)  # expired: afresh
    assert await store.hashes([short]) == [{"b": 2}]


async def test_hashes_read_many_keys_in_order(store):
    tag = uuid.uuid4().hex
    keys = [f"off:{{{tag}}}:h:{i}" for i in range(1200)]  # more than one SQL batch
    for i in (0, 599, 1199):
        await store.incr_fields(keys[i], {"i": i + 1}, ttl=60)
    found = await store.hashes(keys)
    assert len(found) == 1200
    assert {i: f for i, f in enumerate(found) if f} == {0: {"i": 1}, 599: {"i": 600}, 1199: {"i": 1200}}


async def test_hashes_across_slots_on_one_call(store):
    """Keys of different tenants (different hash tags: other slots on a cluster) read together."""
    keys = [key() for _ in range(8)]
    for i, k in enumerate(keys):
        await store.incr_fields(k, {"n": i}, ttl=60)
    assert [f.get("n") for f in await store.hashes(keys)] == list(range(8))


async def test_ranked_set_pages_newest_first_and_drops_old(store):
    k = key()
    assert await store.ranked(k, 0, 10) == (0, [])
    for i in range(30):
        await store.rank(k, f"s{i:02}", float(i), ttl=60)
    await store.rank(k, "s05", 100.0, ttl=60)  # seen again: moves to the front, not added twice
    total, page = await store.ranked(k, 0, 3)
    assert total == 30 and page == [("s05", 100.0), ("s29", 29.0), ("s28", 28.0)]
    total, page = await store.ranked(k, 28, 10)
    assert total == 30 and page == [("s01", 1.0), ("s00", 0.0)]
    assert await store.ranked(k, 0, 0) == (30, [])
    assert await store.ranked(k, 40, 5) == (30, [])
    await store.rank(k, "s30", 30.0, ttl=60, drop_below=10.0)
    total, page = await store.ranked(k, 0, 100)
    assert total == 22 and [m for m, _ in page][-1] == "s10"  # s10..s30 and s05
    short = key()
    await store.rank(short, "x", 1.0, ttl=1)
    await asyncio.sleep(2.1)
    assert await store.ranked(short, 0, 10) == (0, [])


async def test_ranked_set_of_ten_thousand_pages(store):
    """Any page of a large ranked set, by offset (its speed: bench/worst_cases.py)."""
    k = key()
    if isinstance(store, (SQLiteStore, MemoryStore)):
        for i in range(10_000):
            await store.rank(k, f"session-{i:05}", float(i), ttl=60)
    else:
        await store.client.zadd(k, {f"session-{i:05}": float(i) for i in range(10_000)})
        await store.client.expire(k, 60)
    for offset in (0, 5_000, 9_950):
        total, page = await store.ranked(k, offset, 50)
        assert total == 10_000 and len(page) == 50 and page[0][0] == f"session-{9_999 - offset:05}"
        assert [name for name, _ in page] == [f"session-{9_999 - offset - i:05}" for i in range(50)]


async def test_rank_add_sums_scores_and_expires(store):
    k = key()
    await store.rank_add(k, {"a": 5, "b": 1.5}, ttl=60)
    await store.rank_add(k, {"b": 10, "c": 2}, ttl=60)
    await store.rank_add(k, {}, ttl=60)
    assert await store.ranked(k, 0, 2) == (3, [("b", 11.5), ("a", 5.0)])
    short = key()
    await store.rank_add(short, {"x": 3}, ttl=1)
    await asyncio.sleep(1.3)
    assert await store.ranked(short, 0, 10) == (0, [])
    await store.rank_add(short, {"x": 1}, ttl=60)  # expired: from 0 again
    assert await store.ranked(short, 0, 10) == (1, [("x", 1.0)])


async def test_a_server_refusing_the_touch_script_gets_a_command_per_key(redis_url, monkeypatch, caplog):
    """A sharding proxy in front of a `redis://` URL refuses a script over keys of several slots
    (CROSSSLOT), a user without `@scripting` any script (NOPERM): the touch goes a command per key,
    with the same answers, and asks no script again."""
    refused = 'return redis.error_reply("CROSSSLOT Keys in request don\'t hash to the same slot")'
    monkeypatch.setattr(redis_store, "EACH", {"pttl": refused, "expire": refused})
    s = RedisStore(redis_url)
    mark = uuid.uuid4().hex
    keys = [f"off:{{{mark}:{i}}}:test" for i in range(5)]
    try:
        for k in keys[:3]:
            await s.put(k, b"v", ttl=5)
        with caplog.at_level("WARNING", logger="proxy.store.redis"):
            assert await s.touch(keys, ttl=60, slack=30) == [True] * 3 + [False] * 2
        assert "CROSSSLOT" in caplog.text and s._per_key
        assert await s.touch(keys, ttl=60) == [True] * 3 + [False] * 2  # no script asked again
        assert min([await s.client.ttl(k) for k in keys[:3]]) > 30  # extended
    finally:
        for k in keys:
            await s.delete(k)
        await s.close()
