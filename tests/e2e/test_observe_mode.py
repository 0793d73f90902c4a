"""Observe mode end to end: every request goes upstream byte for byte as the client sent it and
the answer comes back as the upstream sent it, in every format, streamed and not, over HTTP and
the Responses WebSocket; the statistics show what the proxy would have forwarded and billed,
apart from managed turns; nothing but statistics is stored."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid

import anthropic
import httpx2
import openai
import pytest

from proxy.replay._runner import requests_of
from tests.harness.history import agent_history

OBSERVE = {"X-Offload-Mode": "observe", "X-Offload-Max-Total-Tokens": "1500"}
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "content-type": "application/json"}


def conversation() -> dict:
    messages = agent_history(steps=6, lines=200)
    messages.append({"role": "assistant", "content": "done"})
    return {"messages": messages}


def body_of(format: str, *, stream: bool) -> dict:
    requests, _ = requests_of(conversation(), format)
    items = requests[-1]
    if format == "chat":
        return {"model": "gpt-4o", "messages": items, "stream": stream}
    if format == "responses":
        return {"model": "gpt-4o", "input": items, "stream": stream}
    system = [m["content"] for m in conversation()["messages"] if m["role"] == "system"][0]
    return {"model": "claude-sonnet-4-5", "max_tokens": 256, "system": system, "messages": items, "stream": stream}


def stats(url: str, key: str, *, observed: int) -> dict:
    deadline = time.monotonic() + 15
    while True:
        r = httpx2.get(
            f"{url}/v1/offload/stats", params={"window": "1h"}, headers={"authorization": f"Bearer {key}"}, timeout=10
        )
        assert r.status_code == 200, r.text
        totals = r.json()["totals"]
        if totals.get("observed", {}).get("requests", 0) >= observed or time.monotonic() > deadline:
            return totals
        time.sleep(0.2)


def stored_keys(data_dir) -> list[str]:
    with sqlite3.connect(data_dir / "offload.sqlite3") as db:
        return [k for (k,) in db.execute("SELECT key FROM kv")] + [k for (k,) in db.execute("SELECT key FROM lists")]


ROUTES = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("format", ["chat", "responses", "anthropic"])
def test_the_request_goes_up_as_sent_and_what_would_have_gone_is_recorded(
    make_proxy, upstream, tmp_path, format, stream
):
    key = f"sk-{uuid.uuid4().hex}"
    # odd spacing, escapes and key order: what goes up is these bytes, not an equal JSON
    raw = json.dumps(body_of(format, stream=stream), indent=1, ensure_ascii=True).encode()
    auth = (
        {"x-api-key": key, **ANTHROPIC_HEADERS}
        if format == "anthropic"
        else {"authorization": f"Bearer {key}", "content-type": "application/json"}
    )
    with make_proxy(data_dir=tmp_path) as url:
        r = httpx2.post(url + ROUTES[format], content=raw, headers={**auth, **OBSERVE}, timeout=30)
        assert r.status_code == 200, r.text
        sent = {
            "chat": upstream.chat_requests,
            "responses": upstream.responses_requests,
            "anthropic": upstream.messages_requests,
        }[format]()
        assert [s.body for s in sent] == [raw]  # one request, byte for byte: no summary call, no reload round
        assert not any(name.lower().startswith("x-offload") for name in r.headers)
        assert not any(name.lower().startswith("x-offload") for name in sent[0].headers)
        totals = stats(url, key, observed=1)
    observed = totals["observed"]
    assert totals["requests"] == 0 and observed["requests"] == 1  # apart from managed turns
    assert observed["tokens_would_forward"] < observed["tokens_forwarded"] * 0.8
    assert (
        observed["actions"]["compact+compress"] + observed["actions"]["compact"] + observed["actions"]["compress"] == 1
    )
    assert observed["would_bill"]["estimate"] is True
    # nothing stored but statistics: no ref, no summary, no event, no session record
    assert stored_keys(tmp_path) and all(":stats:" in k for k in stored_keys(tmp_path)), stored_keys(tmp_path)


def test_the_sdks_unchanged_get_the_upstreams_answers(make_proxy, upstream):
    key = f"sk-ant-{uuid.uuid4().hex}"
    with make_proxy() as url:
        chat = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30, default_headers=OBSERVE)
        history = body_of("chat", stream=False)["messages"]
        answer = chat.chat.completions.create(model="gpt-4o", messages=history)
        assert answer.choices[0].message.content == "Hello there"
        streamed = list(chat.chat.completions.create(model="gpt-4o", messages=history, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices).startswith("Hello there")
        sent = [s.json() for s in upstream.chat_requests()]
        assert sent[0]["messages"] == history and "stream_options" not in sent[1]  # no usage asked for
        assert all(len(s["messages"]) == len(history) and "tools" not in s for s in sent)  # no reload tools

        items = body_of("responses", stream=False)["input"]
        response = chat.responses.create(model="gpt-4o", input=items)
        assert response.output_text
        with chat.responses.stream(model="gpt-4o", input=items) as events:
            assert events.get_final_response().output_text == response.output_text
        for s in upstream.responses_requests():  # as the SDK sent them: no reload tools, no cache key
            assert s.json()["input"] == items and "tools" not in s.json() and "prompt_cache_key" not in s.json()

        claude = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, default_headers=OBSERVE)
        body = body_of("anthropic", stream=False)
        message = claude.messages.create(
            model=body["model"], max_tokens=256, system=body["system"], messages=body["messages"]
        )
        assert message.content[0].text == "Hello there"
        with claude.messages.stream(
            model=body["model"], max_tokens=256, system=body["system"], messages=body["messages"]
        ) as events:
            assert events.get_final_text() == "Hello there"
        for s in upstream.messages_requests():  # no caching added, no reload tools
            assert "cache_control" not in s.body.decode() and "tools" not in s.json()
        totals = stats(url, key, observed=6)
    assert totals["observed"]["requests"] == 6 and totals["requests"] == 0


def test_count_tokens_and_a_tenant_wide_observe_change_nothing(make_proxy, upstream, tmp_path):
    tenants = tmp_path / "tenants.toml"
    key = f"sk-ant-{uuid.uuid4().hex}"
    tenants.write_text('[tenants.trial]\nmode = "observe"\nmax_total_tokens = 1500\n')
    body = body_of("anthropic", stream=False)
    raw = json.dumps(body).encode()
    with make_proxy(tenants_file=tenants, data_dir=tmp_path / "data") as url:
        r = httpx2.post(
            f"{url}/v1/messages/count_tokens",
            content=raw,
            headers={"x-api-key": key, "X-Offload-Tenant": "trial", **ANTHROPIC_HEADERS},
            timeout=30,
        )
        assert r.status_code == 200
        assert upstream.requests[-1].body == raw and upstream.requests[-1].path.endswith("/count_tokens")
        r = httpx2.post(
            f"{url}/v1/messages",
            content=raw,
            timeout=30,
            headers={"x-api-key": key, "X-Offload-Tenant": "trial", **ANTHROPIC_HEADERS},
        )
        assert r.status_code == 200 and upstream.messages_requests()[-1].body == raw


def test_a_websocket_turn_is_observed_like_an_http_one(make_proxy, upstream):
    key = f"sk-{uuid.uuid4().hex}"
    items = body_of("responses", stream=True)["input"]
    with make_proxy() as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)
        with client.responses.connect(extra_headers=OBSERVE) as connection:
            connection.response.create(model="gpt-4o", input=items)
            for event in connection:
                assert event.type != "error", event
                if event.type == "response.completed":
                    break
        sent = upstream.responses_requests()
        assert len(sent) == 1 and sent[0].json() == {"model": "gpt-4o", "input": items, "stream": True}
        totals = stats(url, key, observed=1)
    assert totals["observed"]["requests"] == 1 and totals["requests"] == 0
    assert totals["observed"]["tokens_would_forward"] < totals["observed"]["tokens_forwarded"]
