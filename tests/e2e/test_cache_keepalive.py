"""Keep-alive pings and cold-cache cuts, end to end: the proxy under uvicorn (in this process, and
two replicas as processes on one real Redis) in front of the fake upstream.

The provider's TTL the proxy assumes is a few seconds here (`--cache-ttl`), so the tests run in
real time: they assert what went out (the exact prefix, the session's own credential, how many,
after what), never how fast.
"""

from __future__ import annotations

import json
import time

import httpx2
import openai
import pytest
from starlette.responses import JSONResponse

from proxy.core import keepalive as ka
from tests.e2e.test_compression_e2e import chat_history, is_summary_call
from tests.harness.fleet import replicas, wait_until
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
    return {"model": "claude-sonnet-4-5", "max_tokens": 512,
            "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
            "messages": messages}


def send(url: str, body: dict, key: str, **headers: str) -> httpx2.Response:
    r = httpx2.post(f"{url}/v1/messages", json=body, timeout=30,
                    headers={"x-api-key": key, "anthropic-version": "2023-06-01", **NO_COMPRESSION, **headers})
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
        send(url, messages_body(), key)
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
        send(url, messages_body("a short question"), key)  # far below the minimum
        send(url, messages_body(), key, **{"X-Offload-Cache-Keepalive": "off"})  # large, but off
        time.sleep(2 * TTL)
        assert len(turns(upstream)) == 2 and pings(upstream) == []
    with make_proxy(cache_ttl=TTL, cache_keepalive_min_tokens=1000) as url:  # off by default
        send(url, messages_body(), key)
        time.sleep(2 * TTL)
        assert pings(upstream) == []


def test_no_ping_past_the_idle_limit(make_proxy, upstream, key):
    ttl, idle = 2.0, 4.0  # pings due 1.6 s after each send: at 1.6 and 3.2 s, the next (4.8 s) past the limit
    with make_proxy(**{**KEEPALIVE, "cache_ttl": ttl}, cache_keepalive_idle=idle, cache_keepalive_max_pings=50) as url:
        send(url, messages_body(), key)
        wait_until(lambda: pings(upstream), timeout=30, what="a keep-alive ping")
        time.sleep(idle + 2 * ttl)
        seen = len(pings(upstream))
        time.sleep(2 * ttl)
        assert 1 <= seen <= 2 and len(pings(upstream)) == seen  # they stopped


def test_a_later_turn_replaces_what_is_pinged(make_proxy, upstream, key):
    with make_proxy(**KEEPALIVE, cache_keepalive_max_pings=1) as url:
        send(url, messages_body(turns=1), key)
        send(url, messages_body(turns=2), key)
        wait_until(lambda: pings(upstream), timeout=30, what="a keep-alive ping")
        time.sleep(TTL)
        [ping] = pings(upstream)
        assert ping.json() == {**turns(upstream)[-1].json(), "max_tokens": 1}


def test_two_replicas_on_one_redis_send_one_ping_per_session(upstream, key):
    redis = RedisProcess().start()
    try:
        args = ("--upstream", f"{upstream.url}/v1", "--anthropic-upstream", upstream.url, "--redis-url", redis.url,
                "--cache-ttl", str(TTL), "--cache-keepalive", "on", "--cache-keepalive-min-tokens", "1000",
                "--cache-keepalive-max-pings", "1")
        with replicas(2, *args) as (a, b):
            send(a.url, messages_body(turns=1), key)  # turn 1 on A
            send(b.url, messages_body(turns=2), key)  # turn 2 on B: A's prefix is stale now
            send(a.url, messages_body(turns=2), key)  # turn 2 again on A: both hold the latest
            other = key + "-other"
            send(b.url, messages_body("Another session's log. " * 900), other)
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


def test_a_failing_store_never_fails_a_request(make_proxy, upstream, key):
    with make_proxy(**KEEPALIVE, redis_url=f"redis://127.0.0.1:{free_port()}/0", store_timeout=0.3) as url:
        for turn in (1, 2):
            send(url, messages_body(turns=turn), key)
        time.sleep(2 * TTL)
        assert len(turns(upstream)) == 2 and pings(upstream) == []  # no claim to be had: no ping


# ---------------------------------------------------------------- cold-cache cuts

SESSION_HEADERS = {"X-Offload-Mode": "compress", "X-Offload-Max-Total-Tokens": "3000",
                   "X-Offload-Precompress-Ratio": "0.8", "X-Offload-Hard-Max-Tokens": "100000"}
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
            model="gpt-4o", messages=history, extra_headers={**SESSION_HEADERS, "X-Offload-Session": session})
        assert raw.headers["x-offload-action"] == "none"
        if calls:
            wait_until(lambda: _events(url, key, session, "summary_ready"), what="the summary made ahead")
            return history
    raise AssertionError("no summary was started ahead of the trigger")


def _events(url: str, key: str, session: str, kind: str) -> list:
    data = httpx2.get(f"{url}/v1/offload/events", params={"session": session},
                      headers={"authorization": f"Bearer {key}"}, timeout=10).json()["data"]
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
            model="gpt-4o", messages=history, extra_headers={**SESSION_HEADERS, "X-Offload-Session": session})
        forwarded = json.loads(upstream.chat_requests()[-1].body)["messages"]
        if idle:
            assert raw.headers["x-offload-action"] == "compress"  # the summary made ahead, forwarded now
            assert SNAPSHOT in forwarded[2]["content"]
        else:
            assert raw.headers["x-offload-action"] == "none"  # warm: it waits for its trigger
            assert forwarded == history
        assert len(calls) == 1
