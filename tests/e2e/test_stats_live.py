"""The usage statistics of what happens around a turn, through the real proxy: summaries made in
the background count in their tenant's totals when they finish (once), and the prefix reuse of
the bodies the proxy forwards."""

from __future__ import annotations

import threading
import time
import uuid

import httpx2
import openai
import pytest

from tests.e2e.test_background_summaries import BACKGROUND, gated_summaries, wait_for_event
from tests.e2e.test_compression_e2e import chat_history

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")


@pytest.fixture
def client(proxy_url, upstream, key) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=20)


def stats(url: str, key: str) -> dict:
    r = httpx2.get(f"{url}/v1/offload/stats", params={"window": "1h"}, headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()


def stats_when(url: str, key: str, ready, timeout: float = 10) -> dict:
    """The stats once `ready(totals)` holds (the recorder flushes about once a second)."""
    deadline = time.monotonic() + timeout
    while True:
        body = stats(url, key)
        if ready(body["totals"]) or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def test_a_background_summary_counts_in_the_tenant_totals_once(client, upstream, proxy_url, key):
    gate = threading.Event()
    upstream.handler, calls = gated_summaries(gate)
    history = chat_history(12)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=BACKGROUND)
    assert raw.headers["x-offload-action"] == "compress-pending"
    before = stats_when(proxy_url, key, lambda t: t["requests"] >= 1)["totals"]
    assert before["summaries"] == {"made": 0, "reused": 0, "failed": 0, "pending": 1}  # being made: not yet

    gate.set()
    wait_for_event(proxy_url, "summary_ready", key)
    after = stats_when(proxy_url, key, lambda t: t["summaries"]["made"] >= 1)["totals"]
    assert after["summaries"] == {"made": 1, "reused": 0, "failed": 0, "pending": 1} and after["requests"] == 1

    history2 = history + [{"role": "assistant", "content": "Final answer"}, {"role": "user", "content": "More?"}]
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history2, extra_headers=BACKGROUND)
    assert raw.headers["x-offload-action"] == "compress" and len(calls) == 1
    body = stats_when(proxy_url, key, lambda t: t["requests"] >= 2)
    assert body["totals"]["summaries"] == {"made": 1, "reused": 1, "failed": 0, "pending": 1}  # made once
    assert sum(p["requests"] for p in body["series"]) == 2
    session = httpx2.get(f"{proxy_url}/v1/offload/sessions/bg-1", headers={"authorization": f"Bearer {key}"}).json()
    assert [t["summaries_made"] for t in session["data"]] == [0, 0]  # no turn made it: the background did
    time.sleep(1.5)  # nothing more comes of it
    assert stats(proxy_url, key)["totals"]["summaries"]["made"] == 1


def test_a_failed_background_summary_counts_as_failed(client, upstream, proxy_url, key):
    upstream.handler, calls = gated_summaries(fail=True)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=chat_history(12), extra_headers=BACKGROUND
    )
    assert raw.headers["x-offload-action"] == "compress-pending"
    wait_for_event(proxy_url, "summary_failed", key)
    totals = stats_when(proxy_url, key, lambda t: t["summaries"]["failed"] >= 1)["totals"]
    assert totals["summaries"] == {"made": 0, "reused": 0, "failed": 1, "pending": 1} and len(calls) == 1


def test_prefix_reuse_of_the_forwarded_bodies(client, upstream, proxy_url, key):
    """The same history again is served from the prefix seen; a longer one from its old part;
    another tenant's identical request from nothing."""
    history = chat_history(12)  # nothing offloaded at the default thresholds: forwarded as sent
    sent = [client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)]
    first = stats_when(proxy_url, key, lambda t: t["requests"] >= 1)["totals"]
    assert first["prefix_tokens"] == 0 and first["prefix_reuse"] == 0.0

    sent.append(client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history))
    second = stats_when(proxy_url, key, lambda t: t["requests"] >= 2)["totals"]
    after = int(sent[1].headers["x-offload-tokens-after"])
    assert 0.9 * after <= second["prefix_tokens"] <= after  # all but the last partial block
    longer = history + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "x " * 4000}]
    sent.append(client.chat.completions.with_raw_response.create(model="gpt-4o", messages=longer))
    body = stats_when(proxy_url, key, lambda t: t["requests"] >= 3)
    third = body["totals"]["prefix_tokens"] - second["prefix_tokens"]
    assert 0 < third < int(sent[2].headers["x-offload-tokens-after"])  # the old part only
    forwarded = sum(int(r.headers["x-offload-tokens-after"]) for r in sent)
    assert body["totals"]["prefix_reuse"] == round(body["totals"]["prefix_tokens"] / forwarded, 4)
    assert sum(p["prefix_tokens"] for p in body["series"]) == body["totals"]["prefix_tokens"]

    other = f"sk-{uuid.uuid4().hex}"
    openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=other, max_retries=0).chat.completions.create(
        model="gpt-4o", messages=history
    )
    assert stats_when(proxy_url, other, lambda t: t["requests"] >= 1)["totals"]["prefix_tokens"] == 0
