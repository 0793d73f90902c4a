"""The recorder: turns queued without awaiting, flushed in the background into the store's
buckets and sessions, read back (a store that refuses them: test_backlog)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from proxy.core.answers import Bill
from proxy.stats import _reader as reader
from proxy.stats._buckets import ALL, bucket_key, bucket_start, span_of, top_key, ttl_of
from proxy.stats._prices import PriceTable
from proxy.stats._recorder import SESSION_TURNS, WRITES_AT_ONCE, Recorder, session_keys, sessions_key, turn_of
from proxy.stats._turns import Turn, headline, turn_fields
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.telemetry import RequestRecord

pytestmark = pytest.mark.anyio
A, B = "a" * 32, "b" * 32
PRICES = PriceTable()


def turn(ns: str = A, *, session: str | None = None, t: float | None = None, **fields) -> Turn:
    base = dict(
        namespace=ns,
        session=session,
        time=t if t is not None else time.time(),
        route="chat",
        model="gpt-4o",
        status=200,
        stream=False,
        tokens_before=1000,
        tokens_after=400,
        action="compact",
    )
    return Turn(**{**base, **fields})


def test_turn_fields():
    f = turn_fields(turn(reload_rounds=2, searches=1, warnings=1, store_warnings=1), PRICES)
    assert f["requests"] == 1 and f["tokens_before"] == 1000 and f["tokens_after"] == 400
    assert f["action:compact"] == 1 and f["reload_rounds"] == 2 and f["searches"] == 1
    assert not any(k.startswith(("usd:", "bill:", "cf")) for k in f)  # no usage reported: no money guessed
    assert "summaries_reused" not in f and "errors" not in f  # zeros are not written
    assert turn_fields(turn(action="compress"), PRICES)["summaries_reused"] == 1
    made = turn_fields(turn(action="compact+compress", summaries_made=1), PRICES)
    assert made["summaries_made"] == 1 and "summaries_reused" not in made
    pending = turn_fields(turn(action="compact+compress-pending"), PRICES)
    assert pending["summaries_pending"] == 1 and "summaries_reused" not in pending
    assert turn_fields(turn(status=502), PRICES)["errors"] == 1


def test_emulated_context_management_is_counted_apart_from_the_offload_action():
    both = turn_fields(turn(action="compact+emulated-compaction"), PRICES)
    assert both["action:compact"] == 1 and both["emulated_compactions"] == 1 and "context_edits" not in both
    alone = turn_fields(turn(action="context-edits"), PRICES)
    assert alone["action:none"] == 1 and alone["context_edits"] == 1
    h = headline({**both, **{"action:none": 1, "context_edits": 2}})
    assert h["emulated"] == {"compactions": 1, "context_edits": 2} and h["actions"]["compact"] == 1


def test_headline_of_nothing_and_of_something():
    empty = headline({})
    assert empty["requests"] == 0 and empty["forwarded_ratio"] is None and empty["reload_rate"] is None
    assert empty["actions"]["none"] == 0 and empty["summaries"] == {"made": 0, "reused": 0, "failed": 0, "pending": 0}
    h = headline(
        {
            "requests": 4,
            "tokens_before": 1000,
            "tokens_after": 250,
            "cf_usd:uncached": 0.5,
            "cf_billed_usd": 0.1,
            "usd:turn:uncached": 0.1,
            "usd:summary:output": 0.025,
            "reload_rounds": 1,
            "summaries_pending": 2,
            "action:compact": 3,
            "action:none": 1,
        }
    )
    assert h["tokens_saved"] == 750 and h["forwarded_ratio"] == 0.25 and h["reload_rate"] == 0.25
    assert h["cost_billed_usd"] == 0.125 and h["cost_without_proxy_usd"] == 0.5
    assert h["cost_saved_usd"] == 0.375 and h["stalls_avoided"] == 2 and h["summaries"]["pending"] == 2
    assert h["actions"]["compact"] == 3 and h["actions"]["none"] == 1


def test_turn_of_a_request_record():
    rec = RequestRecord("chat", "POST")
    caller = SimpleNamespace(namespace=A)
    scope = {
        "path": "/v1/chat/completions",
        "state": {"caller": caller},
        "headers": [(b"x-offload-session", b"run-1"), (b"authorization", b"Bearer sk-secret")],
    }
    assert turn_of(rec, scope) is None  # nothing planned: not a managed turn
    rec.tokens_before, rec.tokens_after, rec.action, rec.model, rec.status = 900, 300, "compact", "gpt-4o", 200
    rec.refs, rec.refs_created, rec.reload_rounds = 3, 2, 1
    rec.count_reload("context_search")
    rec.count_reload("context_reload")
    rec.count_summary(True, 0.1)
    rec.count_summary(False, 0.1)
    rec.warnings = ["store unavailable (down); forwarded without offloading"]
    t = turn_of(rec, scope)
    assert t is not None and t.namespace == A and t.session == "run-1" and t.route == "chat"
    assert (t.tokens_before, t.tokens_after, t.refs, t.refs_created, t.reload_rounds) == (900, 300, 3, 2, 1)
    assert (t.searches, t.summaries_made, t.summaries_failed, t.warnings, t.store_warnings) == (1, 1, 1, 1, 1)
    assert "sk-secret" not in repr(t)
    assert t.transport == "http" and t.row()["transport"] == "http"
    rec.transport = "websocket"  # a response.create of the Responses WebSocket mode
    assert turn_of(rec, scope).row()["transport"] == "websocket"
    rec.transport = None
    bad = {**scope, "headers": [(b"x-offload-session", b"bad id with spaces")]}
    assert turn_of(rec, bad).session is None
    assert turn_of(rec, {**scope, "path": "/v1/messages/count_tokens"}) is None
    assert turn_of(rec, {**scope, "path": "/v1/messages"}).route == "messages"
    assert turn_of(rec, {"path": "/v1/chat/completions", "headers": []}) is None  # no caller


async def test_flush_writes_buckets_sessions_and_tenants(tmp_path):
    store = SQLiteStore(tmp_path)
    recorder = Recorder(PRICES, retention=14 * 86400)
    recorder.start(store, Sealer(None))
    now = time.time()
    for i in range(3):
        recorder.record(turn(A, session="s1", t=now, reload_rounds=i))
    recorder.record(turn(B, t=now, action="none", tokens_after=1000))
    recorder.record(turn(A, session="s2", t=now, model="claude-sonnet-4-5"))
    assert recorder.snapshot().queued == 5
    assert await recorder.flush() == 5
    assert recorder.snapshot().recorded == 5 and recorder.snapshot().queued == 0
    [minute_a, hour_all, day_b] = await store.hashes(
        [
            bucket_key(A, "m", bucket_start(now, "m")),
            bucket_key(ALL, "h", bucket_start(now, "h")),
            bucket_key(B, "d", bucket_start(now, "d")),
        ]
    )
    assert minute_a["requests"] == 4 and minute_a["tokens_before"] == 4000 and minute_a["reload_rounds"] == 3
    assert hour_all["requests"] == 5 and hour_all["tokens_after"] == 4 * 400 + 1000
    assert day_b == {"requests": 1, "tokens_before": 1000, "tokens_after": 1000, "action:none": 1}
    assert await store.ranked(top_key("d", bucket_start(now, "d")), 0, 10) == (2, [(A, 4000.0), (B, 1000.0)])

    span = span_of("1h", now)
    mine = await reader.window_stats(store, span, A)
    assert mine["totals"]["requests"] == 4 and mine["totals"]["tokens_saved"] == 2400
    assert sum(p["requests"] for p in mine["series"]) == 4 and mine["series"][-1]["requests"] == 4
    everyone = await reader.window_stats(store, span, None)
    assert everyone["totals"]["requests"] == 5
    rows, more = await reader.tenant_rows(store, span, {A: "acme"})
    assert more is False
    assert [(r["tenant"], r["name"], r["totals"]["requests"]) for r in rows] == [(A, "acme", 4), (B, B[:12], 1)]

    total, page = await reader.sessions_page(store, A, 0, limit=10)
    assert total == 2 and {r["id"] for r in page} == {"s1", "s2"}
    s1 = next(r for r in page if r["id"] == "s1")
    assert s1["turns"] == 3 and s1["tokens_before"] == 3000 and s1["models"] == {"gpt-4o": 3}
    detail = await reader.session_detail(store, A, "s1", sealer=Sealer(None))
    assert [t["reload_rounds"] for t in detail["data"]] == [0, 1, 2] and detail["turns"] == 3
    assert detail["data"][0]["model"] == "gpt-4o" and "namespace" not in detail["data"][0]
    assert await reader.session_detail(store, B, "s1", sealer=Sealer(None)) is None  # another tenant's: not there
    assert await reader.sessions_page(store, B, 0, limit=10) == (0, [])
    await recorder.stop()
    await store.close()


async def test_session_keeps_its_last_turns_sealed_with_encryption(tmp_path):
    store = SQLiteStore(tmp_path)
    sealer = Sealer("a-secret-for-tests")
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(store, sealer)
    for i in range(SESSION_TURNS + 5):
        recorder.record(turn(A, session="secret-run", tokens_before=i))
    await recorder.flush()
    name = sealer.key_name("secret-run", A)
    assert name != "secret-run"
    turns_key, _ = session_keys(A, name)
    raw = await store.items(turns_key)
    assert len(raw) == SESSION_TURNS and all(b"tokens_before" not in item for item in raw)  # sealed
    total, page = await reader.sessions_page(store, A, 0, limit=10)
    assert total == 1 and page[0]["id"] == name and page[0]["turns"] == SESSION_TURNS + 5
    by_id = await reader.session_detail(store, A, "secret-run", sealer=sealer)
    by_name = await reader.session_detail(store, A, name, sealer=sealer)
    assert by_id == by_name and [t["tokens_before"] for t in by_id["data"]][:2] == [5, 6]
    await recorder.stop()
    await store.close()


async def test_background_task_flushes_and_stop_flushes_the_rest(tmp_path):
    store = SQLiteStore(tmp_path)
    recorder = Recorder(PRICES, retention=86400, flush_every=0.05)
    recorder.start(store, Sealer(None))
    recorder.record(turn(A))
    for _ in range(100):
        await asyncio.sleep(0.02)
        if recorder.snapshot().recorded:
            break
    assert recorder.snapshot().recorded == 1
    recorder.flush_every = 3600  # the task sleeps now: only stop() can write the next one
    await asyncio.sleep(0.1)
    recorder.record(turn(A))
    await recorder.stop()
    assert recorder.snapshot().recorded == 2
    [hour] = await store.hashes([bucket_key(A, "h", bucket_start(time.time(), "h"))])
    assert hour["requests"] == 2
    await store.close()


async def test_a_full_queue_drops_new_turns():
    recorder = Recorder(PRICES, retention=86400, max_queue=3)
    for _ in range(5):
        recorder.record(turn(A))
    assert recorder.snapshot().queued == 3 and recorder.snapshot().dropped == 2
    assert await recorder.flush() == 0  # not started: nothing to write to, the queue waits
    assert recorder.snapshot().queued == 3


async def test_retention_as_ttls_and_old_sessions_leave_the_index(tmp_path):
    store = SQLiteStore(tmp_path)
    retention = 86400
    recorder = Recorder(PRICES, retention=retention)
    recorder.start(store, Sealer(None))
    now = time.time()
    recorder.record(turn(A, session="new", t=now))
    recorder.record(turn(A, session="old", t=now - 2 * retention))
    await recorder.flush()
    total, page = await store.ranked(sessions_key(A), 0, 10)
    assert total == 1 and page[0][0] == "new"  # older than the retention: dropped from the index
    await recorder.stop()
    await store.close()


class RecordingStore:
    def __init__(self) -> None:
        self.ttls: dict[str, int] = {}

    async def incr_fields(self, key, amounts, ttl):
        self.ttls[key] = ttl

    async def add_members(self, key, members, ttl, *, slack=0):
        self.ttls[key] = ttl

    async def rank_add(self, key, amounts, ttl):
        self.ttls[key] = ttl

    async def push(self, key, value, *, max_len, ttl):
        self.ttls[key] = ttl

    async def rank(self, key, member, score, ttl, *, drop_below=None):
        self.ttls[key] = ttl


async def test_every_key_gets_its_retention_ttl():
    store, retention = RecordingStore(), 3 * 86400
    recorder = Recorder(PRICES, retention=retention)
    recorder.start(store, Sealer(None))
    now = time.time()
    recorder.record(turn(A, session="s", t=now))
    await recorder.flush()
    await recorder.stop()
    expected = {bucket_key(A, g, bucket_start(now, g)): ttl_of(g, retention) for g in ("m", "h", "d")}
    expected.update({bucket_key(ALL, g, bucket_start(now, g)): ttl_of(g, retention) for g in ("m", "h")})
    expected.update({top_key(g, bucket_start(now, g)): ttl_of(g, retention) for g in ("h", "d")})
    expected.update({k: retention for k in (*session_keys(A, "s"), sessions_key(A))})
    assert store.ttls == expected
    assert expected[bucket_key(A, "m", bucket_start(now, "m"))] == 2 * 86400
    assert expected[bucket_key(A, "d", bucket_start(now, "d"))] == 4 * 86400


class CountingStore(RecordingStore):
    """How many writes are in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.now = self.most = 0

    async def _in_flight(self) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.001)
        self.now -= 1

    async def incr_fields(self, key, amounts, ttl):
        await self._in_flight()

    async def push(self, key, value, *, max_len, ttl):
        await self._in_flight()


async def test_a_burst_of_buckets_and_sessions_is_written_a_few_at_a_time():
    """A flush holding hundreds of buckets and sessions keeps at most WRITES_AT_ONCE writes in
    flight: a Redis connection pool refuses more than its size (seen: 10,000 turns in one flush)."""
    store = CountingStore()
    recorder = Recorder(PRICES, retention=86400, max_queue=5000)
    recorder.start(store, Sealer(None))
    now = time.time()
    for i in range(600):  # 600 minutes, 600 sessions
        recorder.record(turn(A, session=f"s{i}", t=now - 60 * i))
    assert await recorder.flush() == 600
    assert 1 < store.most <= WRITES_AT_ONCE
    await recorder.stop()


@pytest.fixture(params=["sqlite", "redis", "cluster"])
async def any_store(request, tmp_path):
    from proxy.store.redis import RedisStore

    if request.param == "sqlite":
        s = SQLiteStore(tmp_path)
    else:
        s = RedisStore(request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url"))
    yield s
    await s.close()


async def test_recorded_and_read_back_on_every_store(any_store):
    """The whole layout on SQLite, Redis and Redis Cluster (tenants in other slots read together)."""
    import uuid

    tenants = [uuid.uuid4().hex for _ in range(4)]
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(any_store, Sealer(None))
    now = time.time()
    for i, ns in enumerate(tenants):
        for _ in range(i + 1):
            recorder.record(
                turn(
                    ns,
                    session=f"s{i}",
                    t=now,
                    tokens_before=100 * (i + 1),
                    action="compress",
                    model="claude-sonnet-4-5",
                    bill=Bill(uncached=10, cache_read=90 * (i + 1), cache_write_5m=5, output=7, answers=1),
                )
            )
    assert await recorder.flush() == 10
    span = span_of("24h", now)
    for i, ns in enumerate(tenants):
        mine = await reader.window_stats(any_store, span, ns)
        assert mine["totals"]["requests"] == i + 1
        assert mine["totals"]["tokens_before"] == (i + 1) * 100 * (i + 1)
        assert mine["totals"]["summaries"]["reused"] == i + 1
        price = PRICES.price("claude-sonnet-4-5")
        assert mine["totals"]["bill"]["tokens"]["cache_read"] == (i + 1) * 90 * (i + 1)
        assert mine["totals"]["cost_billed_usd"] == pytest.approx(
            (i + 1)
            * (10 * price.input + 90 * (i + 1) * price.cached + 5 * price.cache_write_5m + 7 * price.output)
            / 1e6,
            abs=1e-6,
        )
        total, [row] = await reader.sessions_page(any_store, ns, 0, limit=5)
        assert total == 1 and row["id"] == f"s{i}" and row["turns"] == i + 1
        detail = await reader.session_detail(any_store, ns, f"s{i}", sealer=Sealer(None))
        assert len(detail["data"]) == i + 1
    rows = {r["tenant"]: r["totals"]["requests"] for r in (await reader.tenant_rows(any_store, span, {}))[0]}
    assert {ns: rows.get(ns) for ns in tenants} == {ns: i + 1 for i, ns in enumerate(tenants)}
    everyone = await reader.window_stats(any_store, span, None)
    assert everyone["totals"]["requests"] >= 10  # a shared Redis may hold other tests' turns too
    await recorder.stop()


async def test_stopping_waits_for_a_flush_under_way():
    class SlowStore(RecordingStore):
        async def incr_fields(self, key, amounts, ttl):
            await asyncio.sleep(0.2)
            self.ttls[key] = ttl

    store = SlowStore()
    recorder = Recorder(PRICES, retention=86400, flush_every=0.01)
    recorder.start(store, Sealer(None))
    recorder.record(turn(A))
    await asyncio.sleep(0.08)  # the flush is writing now
    assert recorder.snapshot().queued == 1 and recorder.snapshot().recorded == 0  # held until written
    await recorder.stop()
    assert recorder.snapshot().recorded == 1 and recorder.snapshot().dropped == 0
    assert bucket_key(A, "d", bucket_start(time.time(), "d")) in store.ttls


async def test_turns_being_flushed_are_held_until_written():
    """`queued` counts a turn from the moment it is recorded until it is written, also while a flush
    looks up its session: `offload-proxy wrap` reads the statistics once nothing is held."""
    looking_up, go_on = asyncio.Event(), asyncio.Event()

    class SlowReplies(RecordingStore):
        async def put(self, key, value, ttl):
            looking_up.set()
            await go_on.wait()

    recorder = Recorder(PRICES, retention=86400)
    recorder.start(SlowReplies(), Sealer(None))
    recorder.record(turn(A, session="s", response_id="resp_1"))
    flushing = asyncio.ensure_future(recorder.flush())
    await looking_up.wait()  # the turn has left the queue: its session is being remembered
    assert recorder.snapshot().queued == 1 and recorder.snapshot().recorded == 0
    go_on.set()
    assert await flushing == 1
    assert recorder.snapshot().queued == 0 and recorder.snapshot().recorded == 1
    await recorder.stop()
