"""The prompt caching the proxy adds for a client that asked for none (`--cache-control auto`),
checked against the fake upstream's provider-like cache (`tests.harness.billing`).

- the anthropic SDK, unchanged, sending no `cache_control`: the upstream request carries the
  proxy's caching (request-level `cache_control` and a breakpoint on the system block), and the
  next turn is billed cache reads; streamed too;
- a client's own breakpoints: the request goes as sent (none moved, none added);
- `off` (the header, the serve option, a tenant's key): as sent, and billed uncached every turn;
- a bad `X-Offload-Cache-Control`: a 400 in the Messages error shape, nothing sent upstream;
- the openai SDK: a `prompt_cache_key` of the session's when the upstream is OpenAI's own API
  (the fake stands for it here), none for another upstream, the client's own kept.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from proxy.upstream import base_url as native
from tests.harness.requests import post

MODEL = "claude-sonnet-4-5"
SYSTEM = "You are a careful release engineer. " + " ".join(
    f"Rule {i}: check the rollout log line {i}." for i in range(300)
)
TOOLS = [
    {
        "name": "read_logs",
        "description": "Read a log file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]


def turns() -> list[list[dict]]:
    """Two turns of one conversation: the second resends the first and adds to it."""
    first = [{"role": "user", "content": "Why did the deploy stop?"}]
    second = [
        *first,
        {"role": "assistant", "content": [{"type": "text", "text": "Hello there"}]},
        {"role": "user", "content": "And what now?"},
    ]
    return [first, second]


def sdk(proxy_url: str, key: str, headers: dict | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy_url, api_key=key, max_retries=0, timeout=60, default_headers=headers or {}
    )


@pytest.fixture
def ant_key(key) -> str:
    return "sk-ant-" + key


def test_the_anthropic_sdk_without_cache_control_is_billed_reads_on_the_next_turn(proxy_url, upstream, caches, ant_key):
    client = sdk(proxy_url, ant_key)
    usages = []
    for messages in turns():
        reply = client.messages.create(model=MODEL, max_tokens=100, system=SYSTEM, tools=TOOLS, messages=messages)
        usages.append(reply.usage)
        caches.clock.advance(30)
    sent = [r.json() for r in upstream.messages_requests()]
    for body in sent:
        assert body["cache_control"] == {"type": "ephemeral"}
        assert body["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
        assert body["tools"] == TOOLS and "cache_control" not in json.dumps(body["messages"])
    first, second = usages
    assert first.cache_read_input_tokens == 0 and first.cache_creation_input_tokens > 1024
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens  # the whole first turn
    assert second.cache_creation.ephemeral_5m_input_tokens == second.cache_creation_input_tokens > 0
    assert [b.billed for b in caches.bills][1].read == second.cache_read_input_tokens


def test_streamed_and_after_an_idle_pause_longer_than_the_ttl(proxy_url, upstream, caches, ant_key):
    client = sdk(proxy_url, ant_key)
    usages = []
    for messages, pause in zip([*turns(), turns()[1]], (30, 301, 0)):
        with client.messages.stream(model=MODEL, max_tokens=100, system=SYSTEM, messages=messages) as stream:
            usages.append(stream.get_final_message().usage)
        caches.clock.advance(pause)
    assert usages[1].cache_read_input_tokens == usages[0].cache_creation_input_tokens > 0
    assert usages[2].cache_read_input_tokens == 0  # 301 s idle: expired, written again
    assert (
        usages[2].cache_creation_input_tokens
        == usages[1].cache_read_input_tokens + usages[1].cache_creation_input_tokens
    )


def test_the_clients_own_breakpoints_are_untouched(proxy_url, upstream, caches, ant_key):
    body = {
        "model": MODEL,
        "max_tokens": 100,
        "system": SYSTEM,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Why did the deploy stop?", "cache_control": {"type": "ephemeral"}}
                ],
            }
        ],
    }
    for _ in range(2):
        assert post(proxy_url, "/v1/messages", body=body, key=ant_key).status_code == 200
    assert [r.json() for r in upstream.messages_requests()] == [body, body]
    assert [b.billed.read for b in caches.bills] == [0, caches.bills[0].billed.write_5m]
    nested = {
        **body,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}],
                    }
                ],
            }
        ],
    }
    top = {**body, "cache_control": {"type": "ephemeral", "ttl": "1h"}, "messages": [{"role": "user", "content": "hi"}]}
    for given in (nested, top):
        upstream.requests.clear()
        post(proxy_url, "/v1/messages", body=given, key=ant_key)
        assert upstream.messages_requests()[0].json() == given


@pytest.mark.parametrize("how", ["header", "server", "tenant"])
def test_off_leaves_the_request_as_sent(make_proxy, proxy_url, upstream, caches, ant_key, tmp_path, how):
    body = {"model": MODEL, "max_tokens": 100, "system": SYSTEM, "messages": turns()[0]}
    if how == "header":
        for _ in range(2):
            post(proxy_url, "/v1/messages", body=body, key=ant_key, headers={"X-Offload-Cache-Control": "off"})
    else:
        tenants = tmp_path / "tenants.toml"
        tenants.write_text('[tenants.team]\napi_keys = ["pk-team-cache-off"]\ncache_control = "off"\n')
        options = (
            {"cache_control": "off"}
            if how == "server"
            else {"tenants_file": tenants, "upstream_api_key": "sk-operator", "anthropic_api_key": "sk-ant-operator"}
        )
        with make_proxy(**options) as url:
            for _ in range(2):
                r = post(url, "/v1/messages", body=body, key=ant_key if how == "server" else "pk-team-cache-off")
                assert r.status_code == 200, r.text
    assert [r.json() for r in upstream.messages_requests()] == [body, body]
    assert [(b.billed.read, b.billed.written) for b in caches.bills] == [(0, 0), (0, 0)]


@pytest.mark.parametrize("value", ["on", "", "AUTO", "auto,off", "1", "null", "x" * 300])
def test_a_bad_cache_control_header_is_a_400_in_the_messages_shape(proxy_url, upstream, ant_key, value):
    r = post(
        proxy_url,
        "/v1/messages",
        body={"model": MODEL, "max_tokens": 10, "messages": turns()[0]},
        key=ant_key,
        headers={"X-Offload-Cache-Control": value},
    )
    assert r.status_code == 400, (value, r.text)
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", error
    assert "X-Offload-Cache-Control" in error["error"]["message"]
    assert not upstream.requests


@pytest.fixture
def openai_native(monkeypatch):
    """The fake upstream stands for api.openai.com (its host given a prompt_cache_key)."""
    monkeypatch.setattr(native, "CACHE_KEY_HOSTS", {*native.CACHE_KEY_HOSTS, "127.0.0.1"})


def chat_turns() -> list[list[dict]]:
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Why did the deploy stop?"}]
    return [first, [*first, {"role": "assistant", "content": "Hello there"}, {"role": "user", "content": "Now?"}]]


def test_the_openai_sdk_gets_a_prompt_cache_key_per_session_from_a_native_upstream(
    proxy_url, upstream, caches, key, openai_native
):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=60)
    replies = [client.chat.completions.create(model="gpt-5", messages=m) for m in chat_turns()]
    client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "another conversation"}])
    keys = [r.json().get("prompt_cache_key") for r in upstream.chat_requests()]
    assert keys[0] == keys[1] and keys[0].startswith("offload-") and keys[2] != keys[0]
    assert key not in json.dumps(keys) and key[3:15] not in json.dumps(keys)
    assert replies[1].usage.prompt_tokens_details.cached_tokens >= 1024
    responses = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=60)
    responses.responses.create(model="gpt-5", input="hi", extra_headers={"X-Offload-Session": "s-1"})
    assert upstream.responses_requests()[0].json()["prompt_cache_key"].startswith("offload-")


def test_the_clients_own_prompt_cache_key_stays_and_another_upstream_gets_none(proxy_url, upstream, key, monkeypatch):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=60)
    client.chat.completions.create(model="gpt-5", messages=chat_turns()[0])  # not OpenAI's own API: none
    monkeypatch.setattr(native, "CACHE_KEY_HOSTS", {*native.CACHE_KEY_HOSTS, "127.0.0.1"})
    client.chat.completions.create(model="gpt-5", messages=chat_turns()[0], prompt_cache_key="mine")
    client.chat.completions.create(
        model="gpt-5", messages=chat_turns()[0], extra_headers={"X-Offload-Cache-Control": "off"}
    )
    sent = [r.json() for r in upstream.chat_requests()]
    assert "prompt_cache_key" not in sent[0] and sent[1]["prompt_cache_key"] == "mine"
    assert "prompt_cache_key" not in sent[2]


def test_a_refused_breakpoint_count_is_the_upstreams_400(proxy_url, upstream, caches, ant_key):
    """The fake refuses what Anthropic refuses (5 breakpoints): the client's own, passed on as is."""
    marked = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]
    r = post(
        proxy_url,
        "/v1/messages",
        body={"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": marked}]},
        key=ant_key,
    )
    assert r.status_code == 400 and "maximum of 4" in r.json()["error"]["message"]
