"""What the recorder adds to a turn once it is over: the prefix reuse of its forwarded body, the
summaries made in the background, and the sessions of turns that sent no X-Offload-Session."""

from __future__ import annotations

import asyncio
import os
import time
from types import SimpleNamespace

import pytest

from proxy.core.answers import Bill
from proxy.http import telemetry
from proxy.http.telemetry import Observe, RequestRecord
from proxy.offload.summarizer import SummaryContext, count_summary
from proxy.stats import _reader as reader
from proxy.stats._counters import ALL, PriceTable, Turn, bucket_key, bucket_start, headline, point, span_of, top_key
from proxy.stats._recorder import BLOCK, INLINE_BYTES, Recorder, turn_of
from proxy.stats._sessions import reply_key, session_from_name
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
A, B = "a" * 32, "b" * 32
PRICES = PriceTable()


def record(tokens_after: int = 1000, **fields) -> RequestRecord:
    rec = RequestRecord("chat", "POST")
    rec.tokens_before, rec.tokens_after, rec.action = 2000, tokens_after, "compact"
    rec.model, rec.status = "gpt-4o", 200
    for name, value in fields.items():
        setattr(rec, name, value)
    return rec


def scope(ns: str = A, *, session: bytes | None = None, path: str = "/v1/chat/completions") -> dict:
    headers = [(b"x-offload-session", session)] if session is not None else []
    return {"path": path, "state": {"caller": SimpleNamespace(namespace=ns)}, "headers": headers}


def turn(ns: str = A, **fields) -> Turn:
    base = dict(
        namespace=ns,
        session=None,
        time=time.time(),
        route="responses",
        model="gpt-5",
        status=200,
        stream=False,
        tokens_before=100,
        tokens_after=100,
        action="none",
    )
    return Turn(**{**base, **fields})


@pytest.fixture
async def store(tmp_path):
    s = SQLiteStore(tmp_path)
    yield s
    await s.close()


# ------------------------------------------------------------------ prefix reuse


async def test_prefix_tokens_of_a_resent_body_and_the_body_is_dropped(store):
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(store, Sealer(None))
    body = os.urandom(10 * BLOCK)
    first = record(forwarded=body)
    recorder.observe(first, scope())
    assert first.forwarded is None  # not kept past the measure
    again = record(forwarded=body + os.urandom(10 * BLOCK), tokens_after=3000)
    recorder.observe(again, scope())
    other = record(forwarded=body)  # another tenant's: never reused
    recorder.observe(other, scope(B))
    unmanaged = record(forwarded=body)
    recorder.observe(unmanaged, scope(path="/v1/messages/count_tokens"))
    assert unmanaged.forwarded is None
    turns = list(recorder._queue)
    assert [t.prefix_tokens for t in turns] == [0, 1500, 0]  # half of the second body was seen
    await recorder.flush()
    totals = (await reader.window_stats(store, span_of("1h", time.time()), A))["totals"]
    assert totals["prefix_tokens"] == 1500 and totals["prefix_reuse"] == round(1500 / 4000, 4)
    everyone = await reader.window_stats(store, span_of("1h", time.time()), None)
    assert everyone["totals"]["prefix_tokens"] == 1500 and everyone["series"][-1]["prefix_tokens"] == 1500
    await recorder.stop()


async def test_a_large_body_is_hashed_off_the_loop_and_stop_waits_for_it(store):
    recorder = Recorder(PRICES, retention=86400, flush_every=3600)
    recorder.start(store, Sealer(None))
    body = os.urandom(INLINE_BYTES + BLOCK)
    recorder.observe(record(forwarded=body), scope())
    assert recorder.snapshot().queued == 1 and not recorder._queue  # being hashed
    recorder.observe(record(forwarded=body), scope())
    await recorder.stop()
    assert recorder.snapshot().recorded == 2 and recorder.snapshot().queued == 0
    [hour] = await store.hashes([bucket_key(A, "h", bucket_start(time.time(), "h"))])
    assert hour["requests"] == 2 and hour["prefix_tokens"] == 1000  # the second: wholly reused


def test_headline_point_and_row_carry_prefix_tokens():
    h = headline({"tokens_after": 400, "prefix_tokens": 300})
    assert h["prefix_tokens"] == 300 and h["prefix_reuse"] == 0.75
    assert headline({})["prefix_tokens"] == 0 and headline({})["prefix_reuse"] is None
    assert point(0, {"prefix_tokens": 7})["prefix_tokens"] == 7
    row = turn(prefix_tokens=12, continues="resp_1", response_id="resp_2").row()
    assert row["prefix_tokens"] == 12 and "continues" not in row and "response_id" not in row


# ------------------------------------------------------------------ background summaries


async def test_background_summaries_are_counted_in_the_tenant_buckets(store):
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(store, Sealer(None))
    recorder.count_summary(A, True)
    recorder.count_summary(A, True)
    recorder.count_summary(A, False)
    recorder.count_summary(B, True)
    assert await recorder.flush() == 0  # no turn, the counts written all the same
    now = time.time()
    [minute_a, day_a, hour_all] = await store.hashes(
        [
            bucket_key(A, "m", bucket_start(now, "m")),
            bucket_key(A, "d", bucket_start(now, "d")),
            bucket_key(ALL, "h", bucket_start(now, "h")),
        ]
    )
    assert minute_a == day_a == {"summaries_made": 2, "summaries_failed": 1}
    assert hour_all == {"summaries_made": 3, "summaries_failed": 1}
    totals = (await reader.window_stats(store, span_of("24h", now), A))["totals"]
    assert totals["summaries"] == {"made": 2, "reused": 0, "failed": 1, "pending": 0} and totals["requests"] == 0
    assert await store.ranked(top_key("d", bucket_start(now, "d")), 0, 10) == (0, [])  # no turn: not active
    assert await recorder.flush() == 0  # written once
    [again] = await store.hashes([bucket_key(A, "m", bucket_start(now, "m"))])
    assert again == minute_a
    await recorder.stop()


async def test_a_background_summary_is_counted_in_its_sessions_totals_as_its_bill_is(store):
    """A session whose summary was made in the background shows it made (its bill shows the call
    already): not only the tenant's buckets. A session the statistics would not list counts in
    the tenant's only."""
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(store, Sealer(None))
    recorder.record(turn(session="s1"))
    recorder.count_summary(A, True, session="s1")
    recorder.count_summary(A, False, session="s1")
    recorder.bill_call(A, Bill(cache_read=900, output=40, answers=1), call="summary", model="gpt-5", session="s1")
    recorder.count_summary(A, True, session="not a session id")
    recorder.count_summary(A, True)
    await recorder.flush()
    detail = await reader.session_detail(store, A, "s1", sealer=Sealer(None))
    assert detail["summaries"] == {"made": 1, "reused": 0, "failed": 1, "pending": 0}
    assert detail["bill"]["calls"]["summary"]["tokens"]["cache_read"] == 900
    totals = (await reader.window_stats(store, span_of("1h", time.time()), A))["totals"]
    assert totals["summaries"]["made"] == 3 and totals["summaries"]["failed"] == 1
    await recorder.stop()


def test_a_summary_is_counted_once_in_the_request_or_in_the_background():
    metrics_calls, tallies = [], []
    metrics = SimpleNamespace(count_summary=lambda ok, s: metrics_calls.append(ok))
    ctx = SummaryContext(
        upstream=None, headers=[], model="m", prompt="p", timeout=1, wait=1, metrics=metrics, tally=tallies.append
    )
    rec = RequestRecord("chat", "POST")
    count_summary(True, 0.1, ctx, record=rec)  # inline: the request's record only (its turn counts it)
    assert rec.summaries_made == 1 and tallies == [] and metrics_calls == []
    count_summary(False, 0.1, ctx, record=None)  # made in the background: no request's record
    assert tallies == [False] and metrics_calls == [False] and rec.summaries_failed == 0


# ------------------------------------------------------------------ sessions without the header


def test_the_header_wins_over_the_derived_session():
    rec = record(session="auto-0123456789abcdef", continues="resp_9", response_id="resp_10")
    with_header = turn_of(rec, scope(session=b"mine"))
    assert with_header.session == "mine" and with_header.continues is None and with_header.response_id is None
    derived = turn_of(rec, scope())
    assert derived.session == "auto-0123456789abcdef" and derived.continues is None
    assert derived.response_id == "resp_10"
    continuing = turn_of(record(continues="resp_9"), scope())
    assert continuing.session is None and continuing.continues == "resp_9"
    assert turn_of(record(session="auto-x"), scope(session=b"bad id")).session is None  # as before: not listed


async def test_continuing_turns_join_the_session_of_the_response_they_continue(store):
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(store, Sealer(None))
    recorder.record(turn(session="auto-conv1", response_id="resp_1"))
    recorder.record(turn(continues="resp_1", response_id="resp_2"))  # in the same flush
    assert await recorder.flush() == 2
    recorder.record(turn(continues="resp_2", response_id="resp_3"))
    assert await recorder.flush() == 1
    total, [row] = await reader.sessions_page(store, A, 0, limit=10)
    assert total == 1 and row["id"] == "auto-conv1" and row["turns"] == 3
    # another worker (its own memory) finds them in the store
    other = Recorder(PRICES, retention=86400)
    other.start(store, Sealer(None))
    other.record(turn(continues="resp_3"))
    other.record(turn(B, continues="resp_3"))  # another tenant's ids are not these
    assert await other.flush() == 1  # B's waits for one flush
    assert (await reader.sessions_page(store, A, 0, limit=10))[1][0]["turns"] == 4
    assert await other.flush() == 1  # then starts a session of its own
    total, [row_b] = await reader.sessions_page(store, B, 0, limit=10)
    assert row_b["id"] == session_from_name(B, "response", "resp_3")
    await recorder.stop()
    await other.stop()


async def test_a_continuing_turn_waits_for_the_turn_of_another_worker(store):
    first, second = Recorder(PRICES, retention=86400), Recorder(PRICES, retention=86400)
    first.start(store, Sealer(None))
    second.start(store, Sealer(None))
    first.record(turn(session="auto-conv2", response_id="resp_a"))  # not flushed yet
    second.record(turn(continues="resp_a"))
    assert await second.flush() == 0 and second.snapshot().queued == 1
    await first.flush()
    assert await second.flush() == 1
    _, [row] = await reader.sessions_page(store, A, 0, limit=10)
    assert row["id"] == "auto-conv2" and row["turns"] == 2
    second.record(turn(continues="resp_unknown"))
    await second.stop()  # the last flush waits for nothing
    assert second.snapshot().queued == 0
    assert {r["id"] for r in (await reader.sessions_page(store, A, 0, limit=10))[1]} == {
        "auto-conv2",
        session_from_name(A, "response", "resp_unknown"),
    }
    await first.stop()


async def test_links_are_hashed_and_sealed(store):
    sealer = Sealer("a-secret-for-tests")
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(store, sealer)
    recorder.record(turn(session="auto-secret", response_id="resp_sealed"))
    await recorder.flush()
    stored_key = reply_key(A, "resp_sealed", sealer)
    assert "resp_sealed" not in stored_key
    raw = await store.get(stored_key)
    assert raw is not None and b"auto-secret" not in raw
    assert await Recorder(PRICES, 86400).replies.find(store, A, "resp_sealed", sealer=sealer) == "auto-secret"
    await recorder.stop()


# ------------------------------------------------------------------ when it runs


async def test_on_finished_runs_after_the_whole_body_is_sent():
    order: list[str] = []

    async def app(scope, receive, send):
        telemetry.current.get().forwarded = b"x" * 10
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for more in (True, False):
            await send({"type": "http.response.body", "body": b"chunk", "more_body": more})

    async def send(message):
        await asyncio.sleep(0)
        order.append(message["type"] + (":more" if message.get("more_body") else ""))

    def finished(rec, scope):
        order.append(f"finished:{rec.forwarded is not None}")

    metrics = SimpleNamespace(observe=lambda rec, elapsed: None)
    middleware = Observe(app, metrics, on_finished=finished)
    await middleware({"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": []}, None, send)
    assert order == ["http.response.start", "http.response.body:more", "http.response.body", "finished:True"]


@pytest.mark.parametrize(
    "path, held", [("/v1/chat/completions", 1), ("/v1/messages", 1), ("/v1/offload/stats", 0), ("/v1/models", 0)]
)
async def test_a_turn_is_held_from_its_request_until_it_is_queued(path, held):
    """The client has the whole answer before the turn is queued (`on_finished` runs after the
    last byte): a statistics reader between the two (wrap's closing line) must see it held."""
    recorder = Recorder(PRICES, retention=86400)
    seen: list[int] = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})
        seen.append(recorder.snapshot().queued)  # the client has it all now

    async def send(message):
        pass

    metrics = SimpleNamespace(observe=lambda rec, elapsed: None)
    middleware = Observe(
        app, metrics, on_finished=lambda rec, scope: seen.append(recorder.snapshot().queued), on_started=recorder.opened
    )
    await middleware({"type": "http", "path": path, "method": "POST", "headers": []}, None, send)
    assert seen == [held, held]
    assert recorder.snapshot().queued == 0  # released (nothing was queued: no caller)


async def test_a_turn_is_released_when_its_handler_or_the_accounting_raises():
    recorder = Recorder(PRICES, retention=86400)

    async def app(scope, receive, send):
        raise RuntimeError("handler")

    def finished(rec, scope):
        raise RuntimeError("accounting")

    middleware = Observe(
        app, SimpleNamespace(observe=lambda rec, elapsed: None), on_finished=finished, on_started=recorder.opened
    )
    with pytest.raises(RuntimeError, match="handler"):
        await middleware({"type": "http", "path": "/v1/responses", "method": "POST", "headers": []}, None, None)
    assert recorder.snapshot().queued == 0


def test_the_id_of_an_answer_from_its_first_bytes():
    from proxy.http.accounting import first_id

    assert first_id(b'{"id": "resp_abc123", "object": "response", "output": [{"id": "msg_1"}]}') == "resp_abc123"
    event = b'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_9"'
    assert first_id(event + b',"object":"response"}}\n\n') == "resp_9"
    assert first_id(b'{"previous_response_id":"resp_0","id":"resp_1"}') == "resp_1"
    assert first_id(b'{"id":"resp_cut') is None and first_id(b"") is None
