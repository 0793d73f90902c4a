"""Keep-alive pings and cold-cache cuts, end to end: the proxy under uvicorn (in this process, and
two replicas as processes on one real Redis) in front of the fake upstream.

The provider's TTL the proxy assumes is a few seconds here (`--cache-ttl`), so the tests run in
real time: they assert what went out (the exact prefix, the session's own credential, how many,
after what), never how fast. Where the fake bills as a provider (`tests.harness.billing`), its
cache keeps the provider's own TTL on a clock the test moves: a ping is billed a read there, and
keeps the next turn's prefix read after a gap that would have expired it.
"""

from __future__ import annotations

import json
import time
import uuid

import anthropic
import httpx2
import openai
import pytest
from starlette.responses import JSONResponse

from proxy.core import prompt_cache as ka
from proxy.core import prompt_cache as pc
from proxy.formats import messages as messages_cache
from tests.e2e.test_compression_e2e import chat_history, is_summary_call
from tests.harness import bill_checks as checks
from tests.harness import billing
from tests.harness.fleet import replicas, wait_until
from tests.harness.requests import post
from tests.harness.servers import RedisProcess, completion, free_port

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

TTL = 3.0
LEAD = ka.Limits(1, 1, 1.0, TTL).lead
BIG = "The repository's build log, line by line. " * 600  # ~5,000 tokens
NO_COMPRESSION = {"X-Offload-Max-Total-Tokens": "1000000", "X-Offload-Mode": "off"}


def messages_body(text: str = BIG, *, turns: int = 1) -> dict:
    messages: list[dict] = []
    for i in range(turns):
        messages += [{"role": "user", "content": f"{text} (turn {i})"}, {"role": "assistant", "content": f"ok {i}"}]
    messages.append({"role": "user", "content": "And now?"})
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    }


def messages_turn(url: str, body: dict, key: str, **headers: str) -> httpx2.Response:
    """One Messages turn, compression off (the keep-alive's own prefix), answered 200."""
    r = post(url, "/v1/messages", json=body, key=key, headers={**NO_COMPRESSION, **headers}, timeout=30)
    assert r.status_code == 200, r.text
    return r


def pings(upstream) -> list:
    return [r for r in upstream.messages_requests() if r.json().get("max_tokens") == 1]


def turns(upstream) -> list:
    return [r for r in upstream.messages_requests() if r.json().get("max_tokens") != 1]


def metric(url: str, name: str) -> float:
    lines = httpx2.get(f"{url}/metrics", timeout=10).text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(name) and not line.startswith("#"))


KEEPALIVE = {"cache_ttl": TTL, "cache_keepalive": "on", "cache_keepalive_min_tokens": 1000}


def test_a_ping_goes_before_the_ttl_with_the_exact_prefix_and_the_sessions_credential(make_proxy, upstream, key):
    with make_proxy(**KEEPALIVE, cache_keepalive_max_pings=1) as url:
        messages_turn(url, messages_body(), key)
        wait_until(lambda: pings(upstream), timeout=30, what="a keep-alive ping")
        time.sleep(TTL)  # at most one (max pings 1)
        [turn], [ping] = turns(upstream), pings(upstream)
        sent = turn.json()
        assert ping.json() == {**sent, "max_tokens": 1}  # the same prompt: system, messages, model
        assert ping.headers["x-api-key"] == key and ping.headers.get("anthropic-version") == "2023-06-01"
        assert ping.at - turn.at >= TTL - LEAD - 0.05  # never early: due shortly before the TTL
        assert metric(url, 'offload_keepalive_pings_total{outcome="ok"}') == 1
        assert metric(url, "offload_keepalive_cost_tokens_total") > 0


def test_no_ping_for_a_small_prefix_nor_when_off(make_proxy, upstream, key):
    with make_proxy(**KEEPALIVE) as url:
        messages_turn(url, messages_body("a short question"), key)  # far below the minimum
        messages_turn(url, messages_body(), key, **{"X-Offload-Cache-Keepalive": "off"})  # large, but off
        time.sleep(2 * TTL)
        assert len(turns(upstream)) == 2 and pings(upstream) == []
    with make_proxy(cache_ttl=TTL, cache_keepalive_min_tokens=1000) as url:  # off by default
        messages_turn(url, messages_body(), key)
        time.sleep(2 * TTL)
        assert pings(upstream) == []


def test_no_ping_past_the_idle_limit(make_proxy, upstream, key):
    ttl, idle = 2.0, 4.0  # pings due 1.6 s after each send: at 1.6 and 3.2 s, the next (4.8 s) past the limit
    with make_proxy(**{**KEEPALIVE, "cache_ttl": ttl}, cache_keepalive_idle=idle, cache_keepalive_max_pings=50) as url:
        messages_turn(url, messages_body(), key)
        wait_until(lambda: pings(upstream), timeout=30, what="a keep-alive ping")
        time.sleep(idle + 2 * ttl)
        seen = len(pings(upstream))
        time.sleep(2 * ttl)
        assert 1 <= seen <= 2 and len(pings(upstream)) == seen  # they stopped


def test_a_later_turn_replaces_what_is_pinged(make_proxy, upstream, key):
    with make_proxy(**KEEPALIVE, cache_keepalive_max_pings=1) as url:
        messages_turn(url, messages_body(turns=1), key)
        messages_turn(url, messages_body(turns=2), key)
        wait_until(lambda: pings(upstream), timeout=30, what="a keep-alive ping")
        time.sleep(TTL)
        [ping] = pings(upstream)
        assert ping.json() == {**turns(upstream)[-1].json(), "max_tokens": 1}


def fleet_args(upstream, redis: RedisProcess, ttl: float) -> tuple[str, ...]:
    """Two replicas' options: the fake upstream, one Redis, keep-alive on with one ping a turn."""
    return (
        "--upstream",
        f"{upstream.url}/v1",
        "--anthropic-upstream",
        upstream.url,
        "--redis-url",
        redis.url,
        "--cache-ttl",
        str(ttl),
        "--cache-keepalive",
        "on",
        "--cache-keepalive-min-tokens",
        "1000",
        "--cache-keepalive-max-pings",
        "1",
    )


def test_two_replicas_on_one_redis_send_one_ping_per_session(upstream, key):
    redis = RedisProcess().start()
    try:
        with replicas(2, *fleet_args(upstream, redis, TTL)) as (a, b):
            messages_turn(a.url, messages_body(turns=1), key)  # turn 1 on A
            messages_turn(b.url, messages_body(turns=2), key)  # turn 2 on B: A's prefix is stale now
            messages_turn(a.url, messages_body(turns=2), key)  # turn 2 again on A: both hold the latest
            other = key + "-other"
            messages_turn(b.url, messages_body("Another session's log. " * 900), other)
            wait_until(lambda: len(pings(upstream)) >= 2, timeout=30, what="the pings")
            time.sleep(2 * TTL)
            by_key = {}
            for ping in pings(upstream):
                by_key.setdefault(ping.headers["x-api-key"], []).append(ping)
            assert sorted(map(len, by_key.values())) == [1, 1], by_key.keys()  # one per session, not per replica
            assert by_key[key][0].json() == {**messages_body(turns=2), "max_tokens": 1}
            assert by_key[other][0].json()["messages"][0]["content"].startswith("Another session's log.")
    finally:
        redis.stop()


def test_a_ping_keeps_the_providers_cache_warm_and_is_billed_to_its_session(upstream, caches):
    """Two replicas on one Redis hold a session's prefix (its turn went to both); one pings it.
    The fake bills the ping a cache read, and the turn that comes after a gap longer than the
    provider's TTL since the turn (within it since the ping) reads the prefix instead of writing
    it; the session's bill shows the ping (call "keepalive"): its count and cost."""
    ttl = 6.0  # the proxy's, in real time: the ping is due 4.8 s after the turn
    key, session = f"sk-ant-{uuid.uuid4().hex}", f"warm-{uuid.uuid4().hex[:12]}"
    redis = RedisProcess().start()
    try:
        with replicas(2, *fleet_args(upstream, redis, ttl)) as (a, b):

            def client(url: str) -> anthropic.Anthropic:
                return anthropic.Anthropic(
                    base_url=url,
                    api_key=key,
                    max_retries=0,
                    timeout=60,
                    default_headers={**NO_COMPRESSION, "X-Offload-Session": session},
                )

            first = [{"role": "user", "content": f"{BIG} Why did it fail?"}]  # no cache_control: the proxy's
            for replica in (a, b):  # the same turn through both: each holds the prefix (the fake: written, read)
                client(replica.url).messages.create(model="claude-sonnet-4-5", max_tokens=512, messages=first)
            caches.clock.advance(250)  # the fake's time when the ping comes (its TTL: 300 s)
            moved = time.monotonic()
            wait_until(lambda: pings(upstream), timeout=30, what="a keep-alive ping")
            time.sleep(ttl / 2)  # the other replica's would be due by now
            [ping] = pings(upstream)
            assert ping.at > moved, "the ping came before the fake's clock was moved: the machine is too slow"
            assert sum(metric(r.url, 'offload_keepalive_pings_total{outcome="ok"}') for r in (a, b)) == 1

            caches.clock.advance(250)  # 500 s since the turn, 250 since the ping
            second = [*first, {"role": "assistant", "content": "Hello there"}, {"role": "user", "content": "Fix it?"}]
            client(a.url).messages.create(
                model="claude-sonnet-4-5",
                max_tokens=512,
                messages=second,
                extra_headers={"X-Offload-Cache-Keepalive": "off"},
            )  # no more pings
            bills = caches.of(key)
            assert [checks.call_of(bill) for bill in bills] == ["turn", "turn", "keepalive", "turn"]
            turn, again, pinged, after = (bill.billed for bill in bills)
            assert turn.read == 0 and turn.written > 1000 and again.read == turn.written
            assert (pinged.read, pinged.written, pinged.uncached) == (turn.written, 0, 0)  # the whole prefix read
            assert after.read == turn.written and after.written == after.total - turn.written > 0  # the new part only
            # without the ping the same requests find the cache cold: all written again
            cold = pc.bill_all(
                bills[0].profile,
                [
                    messages_cache.cached_request(bill.rec.json(), at, billing.estimate)
                    for bill, at in zip((bills[0], bills[1], bills[3]), (0, 0, 500))
                ],
            )
            assert cold[2].read == 0 and cold[2].written == after.total

            shown = checks.assert_shown(a.url, key, session, bills, model="claude-sonnet-4-5", turns=3)
            keepalive = shown["bill"]["calls"]["keepalive"]
            assert keepalive["answers"] == 1 and keepalive["tokens"]["cache_read"] == turn.written
            assert keepalive["usd"]["total"] > 0
    finally:
        redis.stop()


def test_a_failing_store_never_fails_a_request(make_proxy, upstream, key):
    with make_proxy(**KEEPALIVE, redis_url=f"redis://127.0.0.1:{free_port()}/0", store_timeout=0.3) as url:
        for turn in (1, 2):
            messages_turn(url, messages_body(turns=turn), key)
        time.sleep(2 * TTL)
        assert len(turns(upstream)) == 2 and pings(upstream) == []  # no claim to be had: no ping


# ---------------------------------------------------------------- cold-cache cuts

SESSION_HEADERS = {
    "X-Offload-Mode": "compress",
    "X-Offload-Max-Total-Tokens": "3000",
    "X-Offload-Precompress-Ratio": "0.8",
    "X-Offload-Hard-Max-Tokens": "100000",
}
SNAPSHOT = "<state_snapshot><task_overview>the plan so far</task_overview></state_snapshot>"


def summariser(calls: list):
    async def handler(request, rec):
        if is_summary_call(rec):
            calls.append(rec)
            return JSONResponse(completion(SNAPSHOT, usage=(300, 40)))
        return JSONResponse(completion("Final answer"))

    return handler


def summary_ready_below_the_trigger(url: str, key: str, session: str, calls: list) -> list[dict]:
    """The first history whose turn started a summary ahead of time (its action still none), once
    that summary is stored."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=20)
    for n in range(4, 40):
        history = chat_history(n)
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=history, extra_headers={**SESSION_HEADERS, "X-Offload-Session": session}
        )
        assert raw.headers["x-offload-action"] == "none"
        if calls:
            wait_until(lambda: _events(url, key, session, "summary_ready"), what="the summary made ahead")
            return history
    raise AssertionError("no summary was started ahead of the trigger")


def _events(url: str, key: str, session: str, kind: str) -> list:
    data = httpx2.get(
        f"{url}/v1/offload/events", params={"session": session}, headers={"authorization": f"Bearer {key}"}, timeout=10
    ).json()["data"]
    return [e for e in data if e["type"] == kind]


@pytest.mark.parametrize("ttl,idle", [(60.0, 0.0), (2.0, 2.5)], ids=["warm", "cold"])
def test_a_cut_due_soon_is_made_at_the_cold_turn_and_not_when_warm(make_proxy, upstream, key, ttl, idle):
    calls: list = []
    upstream.handler = summariser(calls)
    with make_proxy(cache_ttl=ttl) as url:
        session = f"cold-{idle}"
        history = summary_ready_below_the_trigger(url, key, session, calls)
        time.sleep(idle)  # longer than the TTL: the cache is cold
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=20)
        raw = client.chat.completions.with_raw_response.create(  # the same turn again (below its trigger still)
            model="gpt-4o", messages=history, extra_headers={**SESSION_HEADERS, "X-Offload-Session": session}
        )
        forwarded = json.loads(upstream.chat_requests()[-1].body)["messages"]
        if idle:
            assert raw.headers["x-offload-action"] == "compress"  # the summary made ahead, forwarded now
            assert SNAPSHOT in forwarded[2]["content"]
            # the next turn, warm and below its trigger still, forwards the cut again: never undone
            later = [*history, {"role": "assistant", "content": "Noted."}, {"role": "user", "content": "Next?"}]
            client.chat.completions.create(
                model="gpt-4o", messages=later, extra_headers={**SESSION_HEADERS, "X-Offload-Session": session}
            )
            again = json.loads(upstream.chat_requests()[-1].body)["messages"]
            assert again[: len(forwarded)] == forwarded and again[len(forwarded) :] == later[len(history) :]
        else:
            assert raw.headers["x-offload-action"] == "none"  # warm: it waits for its trigger
            assert forwarded == history
        assert len(calls) == 1


# ---------------------------------------------------------------- the event loop


def test_a_large_body_is_given_caching_and_held_off_the_event_loop(make_proxy, upstream, key, monkeypatch):
    """The caching the proxy adds (a walk of the whole body for a client's `cache_control`), the
    session's record of what was forwarded (a digest of its bytes) and the keep-alive ping made
    from it (parsed again, walked, written) take as long as the body is large: for a large body
    of many small blocks, off the event loop like the turn's plan."""
    from proxy.formats.messages import _wire as wire
    from proxy.http import managed as cache_session
    from proxy.offload import cache_keepalive as keepalive
    from tests.harness.inflight import spy_threads

    caching = spy_threads(monkeypatch, wire, "with_caching")
    held = spy_threads(monkeypatch, keepalive, "ping_body")
    digested = spy_threads(monkeypatch, cache_session, "digest")
    blocks = [{"type": "text", "text": f"w{i}"} for i in range(300)]
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": blocks} for i in range(301)],
    }
    assert len(json.dumps(body)) > 1024 * 1024
    with make_proxy(**KEEPALIVE) as url:
        messages_turn(url, body, key)
        wait_until(lambda: held, timeout=30, what="the prefix held for keep-alive")
    assert turns(upstream)[-1].json()["cache_control"] == {"type": "ephemeral"}  # the proxy's caching went
    assert caching and all(name.startswith("offload-cpu") for name in caching), caching
    assert all(name.startswith("offload-cpu") for name in held), held
    assert digested and all(name.startswith("offload-cpu") for name in digested), digested


def test_a_ping_is_billed_as_the_upstream_bills_it(make_proxy, upstream, key):
    """A ping answered 200 is billed (its usage, or counted without one); a refused ping (a 429,
    a 401) is not an answer the provider bills: never counted as one without usage."""
    from tests.e2e.test_bill import totals
    from tests.harness import anthropic as fake_anthropic

    refused = key + "-refused"
    usage = {"input_tokens": 3, "cache_read_input_tokens": 5000, "cache_creation_input_tokens": 0, "output_tokens": 1}

    async def handler(request, rec):
        body = rec.json()
        if body.get("max_tokens") == 1 and rec.headers["x-api-key"] == refused:
            return JSONResponse(
                {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, status_code=429
            )
        return fake_anthropic.answer(rec, fake_anthropic.message(fake_anthropic.text("ok"), usage=usage))

    upstream.handler = handler
    with make_proxy(**KEEPALIVE, cache_keepalive_max_pings=1) as url:
        messages_turn(url, messages_body(), key)
        messages_turn(url, messages_body("Another session's log. " * 900), refused)
        wait_until(lambda: len(pings(upstream)) == 2, timeout=30, what="both pings")
        time.sleep(1.0)  # their bills flushed
        billed, not_billed = (totals(url, k, 1)["bill"]["calls"]["keepalive"] for k in (key, refused))
        counted = metric(url, 'offload_billed_tokens_total{call="keepalive",kind="cache_read"}')
        unreported = metric(url, 'offload_turns_without_usage_total{call="keepalive"}')
    assert billed["answers"] == 1 and billed["tokens"]["cache_read"] == 5000 and billed["answers_without_usage"] == 0
    assert not_billed["answers"] == 0 and not_billed["answers_without_usage"] == 0, not_billed
    assert (counted, unreported) == (5000, 0)  # the Prometheus counters of the bill, as for turns and summaries
