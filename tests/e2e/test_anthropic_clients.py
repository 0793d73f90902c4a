"""The anthropic SDK (`client.messages.*`), unchanged, through the proxy's `POST /v1/messages`.

A large `tool_result` is offloaded (a marker with `ref=` goes upstream instead, the client's
`cache_control` on it), the model gets `context_reload` / `context_search` as Anthropic client
tools, and a reload round the proxy runs itself stays invisible: the client gets one message (or
one stream) with usage summed over the rounds, prompt-cache fields included. Thinking blocks go
back to the upstream untouched. Errors are Anthropic-shaped.
"""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest

from proxy.core.texts import refs_in
from tests.harness.anthropic import (
    answer,
    events,
    message,
    parse_sse,
    redacted_thinking,
    text,
    thinking,
    tool_use,
    usage,
)
from tests.harness.servers import scripted

HEADERS = {
    "X-Offload-Max-Total-Tokens": "1000",
    "X-Offload-Max-Tool-Message-Tokens": "500",
    "X-Offload-Max-Reload-Tokens": "50000",
}
NEEDLE = "2024-05-01T12:06:17Z NOTICE deploy-7 rollout paused at 512 MiB by the quota"
LOG = "\n".join(
    NEEDLE
    if i == 377
    else f"2024-05-01T12:{i // 60:02d}:{i % 60:02d}Z INFO worker-{i % 7} GET /api/items/{i} 200 {i % 97} ms"
    for i in range(480)
)
TOOL_ID = "toolu_read_logs_1"
TOOLS = [
    {
        "name": "read_logs",
        "description": "Read a log file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
]
ANSWER = "The deploy paused at 512 MiB: the quota."
MODEL = "claude-sonnet-4-5"


def history(*, cache: bool = False) -> list[dict]:
    """user, the model's call of the client's tool, its 30 KB result (+ a text block), a reply, a new user turn."""
    result = {"type": "tool_result", "tool_use_id": TOOL_ID, "content": LOG}
    if cache:
        result["cache_control"] = {"type": "ephemeral"}
    return [
        {"role": "user", "content": "Why did the deploy stop? Read the logs."},
        {
            "role": "assistant",
            "content": [
                thinking("I should read the logs."),
                text("Reading the logs."),
                tool_use("read_logs", {"path": "/var/log/deploy.log"}, id=TOOL_ID),
            ],
        },
        {"role": "user", "content": [result, text("That is the whole log.")]},
        {"role": "assistant", "content": [text("I have read it.")]},
        {"role": "user", "content": "Summarise in one sentence."},
    ]


def client(proxy_url: str, key: str = "sk-ant-test-key", headers: dict | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy_url, api_key=key, max_retries=0, timeout=20, default_headers={**HEADERS, **(headers or {})}
    )


def aclient(proxy_url: str, key: str = "sk-ant-test-key") -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=proxy_url, api_key=key, max_retries=0, timeout=20, default_headers=HEADERS)


def sent_messages(rec) -> list[dict]:
    return rec.json()["messages"]


def the_result(messages: list[dict]) -> dict:
    [block] = [
        b
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and b["tool_use_id"] == TOOL_ID
    ]
    return block


def assert_offloaded(rec, *, cache: bool = False) -> str:
    """The upstream got the history with the big result replaced by a marker; its ref."""
    sent, got = history(cache=cache), sent_messages(rec)
    assert len(LOG) > 30_000 and NEEDLE not in json.dumps(rec.json())
    assert [m["role"] for m in got[: len(sent)]] == [m["role"] for m in sent]
    assert got[0] == sent[0] and got[1] == sent[1]  # the thinking block with its signature, untouched
    assert got[3 : len(sent)] == sent[3:]
    block = the_result(got)
    marker = block["content"] if isinstance(block["content"], str) else block["content"][0]["text"]
    assert marker.startswith("[offloaded tool result: ") and len(marker) < 2_000, marker[:200]
    assert got[2]["content"][1] == sent[2]["content"][1]  # the text block after it, in its place
    if cache:
        assert block["cache_control"] == {"type": "ephemeral"}
    names = [t.get("name") for t in rec.json()["tools"]]
    assert names == ["read_logs", "web_search", "context_reload", "context_search"]
    assert "input_schema" in rec.json()["tools"][2]
    [ref] = refs_in(marker)
    return ref


def reload_then_answer(
    *,
    first_usage=usage(900, 20, cache_read=700),
    second_usage=usage(1400, 30, cache_read=900),
    with_thinking: bool = True,
):
    """Round 1: the model reloads the ref the marker names (after thinking); round 2: the answer."""

    def first(rec):
        ref = assert_offloaded(rec)
        blocks = [thinking("The marker names a ref; reload it."), redacted_thinking()] if with_thinking else []
        msg = message(*blocks, tool_use("context_reload", {"ref": ref}, id="toolu_reload_1"), usage=first_usage)
        return answer_like(rec, msg)

    def second(rec):
        return answer_like(rec, message(text(ANSWER), usage=second_usage))

    return scripted(first, second)


def answer_like(rec, msg: dict):
    return answer(rec, msg)


def assert_reload_round(upstream, *, with_thinking: bool = True) -> None:
    rounds = upstream.messages_requests()
    assert len(rounds) == 2
    second = sent_messages(rounds[1])
    assert len(second) == len(sent_messages(rounds[0])) + 2
    assistant, results = second[-2], second[-1]
    assert assistant["role"] == "assistant" and results["role"] == "user"
    kinds = [b["type"] for b in assistant["content"]]
    assert kinds == (["thinking", "redacted_thinking", "tool_use"] if with_thinking else ["tool_use"])
    if with_thinking:
        assert assistant["content"][0]["signature"] == thinking()["signature"]  # verbatim
    [result] = results["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_reload_1"
    reloaded = result["content"] if isinstance(result["content"], str) else result["content"][0]["text"]
    assert NEEDLE in reloaded


def test_create_reloads_in_a_hidden_round_and_sums_usage(proxy_url, upstream):
    upstream.handler = reload_then_answer()
    raw = client(proxy_url).messages.with_raw_response.create(
        model=MODEL, max_tokens=1024, messages=history(), tools=TOOLS
    )
    assert raw.headers["x-offload-action"] == "compact"
    assert int(raw.headers["x-offload-tokens-after"]) < int(raw.headers["x-offload-tokens-before"])
    got = raw.parse()
    # the hidden round's thinking is shown (a stream shows it as it comes), its tool_use is not
    assert [b.type for b in got.content] == ["thinking", "redacted_thinking", "text"]
    assert got.content[-1].text == ANSWER
    assert got.stop_reason == "end_turn" and got.model == MODEL
    assert (got.usage.input_tokens, got.usage.output_tokens) == (2300, 50)
    assert got.usage.cache_read_input_tokens == 1600 and got.usage.cache_creation_input_tokens == 0
    assert_reload_round(upstream)
    for rec in upstream.requests:  # the credential as the SDK sent it (this version: a bearer token)
        sent = rec.headers.get("x-api-key") or rec.headers["authorization"].removeprefix("Bearer ")
        assert sent == "sk-ant-test-key" and rec.headers["anthropic-version"]
        assert not any(k.startswith("x-offload-") for k in rec.headers)


@pytest.mark.anyio
async def test_async_create(proxy_url, upstream):
    upstream.handler = reload_then_answer(with_thinking=False)
    got = await aclient(proxy_url).messages.create(model=MODEL, max_tokens=1024, messages=history(), tools=TOOLS)
    assert got.content[0].text == ANSWER and not any(b.type == "tool_use" for b in got.content)
    assert_reload_round(upstream, with_thinking=False)


def test_stream_is_one_message(proxy_url, upstream):
    upstream.handler = reload_then_answer()
    with client(proxy_url).messages.stream(model=MODEL, max_tokens=1024, messages=history(), tools=TOOLS) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == ANSWER
    assert [b.type for b in final.content] == ["thinking", "redacted_thinking", "text"]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (2300, 50)
    assert final.usage.cache_read_input_tokens == 1600
    assert_reload_round(upstream)


def test_raw_stream_events(proxy_url, upstream):
    """One message_start, indices contiguous after hiding, ping relayed, one message_delta, one message_stop."""
    upstream.handler = reload_then_answer()
    body = {"model": MODEL, "max_tokens": 1024, "messages": history(), "tools": TOOLS, "stream": True}
    r = httpx2.post(
        f"{proxy_url}/v1/messages",
        json=body,
        timeout=20,
        headers={**HEADERS, "x-api-key": "sk-ant-test-key", "anthropic-version": "2023-06-01"},
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-offload-action"] == "compact"
    got = parse_sse(r.content)
    kinds = [e["type"] for e in got]
    assert kinds.count("message_start") == 1 and kinds.count("message_delta") == 1 and kinds.count("message_stop") == 1
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert "ping" in kinds
    starts = [e for e in got if e["type"] == "content_block_start"]
    assert [e["index"] for e in starts] == list(range(len(starts)))
    assert all(e["content_block"].get("name") != "context_reload" for e in starts)
    delta = got[-2]
    assert delta["delta"]["stop_reason"] == "end_turn" and delta["usage"]["output_tokens"] == 50
    assert delta["usage"]["input_tokens"] == 2300 and delta["usage"]["cache_read_input_tokens"] == 1600


def test_a_round_mixing_injected_and_client_tools_returns_the_clients(proxy_url, upstream):
    def mixed(rec):
        ref = assert_offloaded(rec)
        return answer_like(
            rec,
            message(
                tool_use("context_reload", {"ref": ref}, id="toolu_r"),
                tool_use("read_logs", {"path": "/var/log/app.log"}, id="toolu_client"),
            ),
        )

    upstream.handler = scripted(mixed)
    got = client(proxy_url).messages.create(model=MODEL, max_tokens=1024, messages=history(), tools=TOOLS)
    assert [(b.type, b.name) for b in got.content] == [("tool_use", "read_logs")]
    assert got.stop_reason == "tool_use" and len(upstream.messages_requests()) == 1


def test_cache_control_stays_on_the_marker(proxy_url, upstream):
    upstream.handler = scripted(
        lambda rec: (assert_offloaded(rec, cache=True), answer_like(rec, message(text("ok"))))[1]
    )
    system = [{"type": "text", "text": "You are a log reader.", "cache_control": {"type": "ephemeral"}}]
    got = client(proxy_url).messages.create(
        model=MODEL, max_tokens=1024, system=system, messages=history(cache=True), tools=TOOLS
    )
    assert got.content[0].text == "ok"
    sent = upstream.messages_requests()[0].json()
    assert sent["system"] == system
    breakpoints = json.dumps(sent).count('"cache_control"')
    assert breakpoints == 2


def test_beta_query_and_headers_are_relayed(proxy_url, upstream):
    got = client(proxy_url).beta.messages.create(
        model=MODEL, max_tokens=64, betas=["context-1m-2025-08-07"], messages=[{"role": "user", "content": "hi"}]
    )
    assert got.content[0].text == "Hello there"
    [rec] = upstream.messages_requests()
    assert rec.headers["anthropic-beta"] == "context-1m-2025-08-07"
    # what Claude Code sends: /v1/messages?beta=true, managed all the same, the query kept
    r = httpx2.post(
        f"{proxy_url}/v1/messages?beta=true",
        json={"model": MODEL, "max_tokens": 1024, "messages": history(), "tools": TOOLS},
        headers={**HEADERS, "x-api-key": "sk-ant-test-key", "anthropic-version": "2023-06-01"},
        timeout=20,
    )
    assert r.status_code == 200 and r.headers["x-offload-action"] == "compact"
    assert upstream.messages_requests()[-1].query == "beta=true"


def test_errors_are_anthropic_shaped(proxy_url, upstream):
    with pytest.raises(anthropic.BadRequestError) as bad:
        client(proxy_url, headers={"X-Offload-Mode": "sideways"}).messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert bad.value.body["type"] == "error" and bad.value.body["error"]["type"] == "invalid_request_error"
    assert "X-Offload-Mode" in bad.value.body["error"]["message"]
    r = httpx2.post(
        f"{proxy_url}/v1/messages",
        content=b"{not json",
        timeout=20,
        headers={"x-api-key": "sk-ant-test-key", "anthropic-version": "2023-06-01"},
    )
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx2.post(
        f"{proxy_url}/v1/messages",
        json={"model": MODEL, "messages": "nope"},
        timeout=20,
        headers={"x-api-key": "sk-ant-test-key"},
    )
    assert r.status_code == 400 and r.json()["type"] == "error"
    r = httpx2.post(f"{proxy_url}/v1/messages", json={}, headers={"anthropic-version": "2023-06-01"}, timeout=20)
    assert r.status_code == 401 and r.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": r.json()["error"]["message"]},
    }
    assert not upstream.requests


def test_upstream_errors_are_relayed_as_they_are(proxy_url, upstream):
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

    async def busy(request, rec):
        from starlette.responses import JSONResponse

        return JSONResponse(overloaded, status_code=529)

    upstream.handler = busy
    with pytest.raises(anthropic.APIStatusError) as failed:
        client(proxy_url).messages.create(model=MODEL, max_tokens=1024, messages=history(), tools=TOOLS)
    assert failed.value.status_code == 529 and failed.value.body == overloaded


def test_an_upstream_error_event_ends_the_stream(proxy_url, upstream):
    def broken(rec):
        from starlette.responses import StreamingResponse

        chunks = events(message(text("partial answer")))[:3]
        chunks.append(
            b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
        )
        return StreamingResponse(iter(chunks), media_type="text/event-stream")

    upstream.handler = scripted(broken)
    with pytest.raises(anthropic.APIStatusError) as failed:
        with client(proxy_url).messages.stream(model=MODEL, max_tokens=1024, messages=history(), tools=TOOLS) as s:
            "".join(s.text_stream)
    assert "Overloaded" in str(failed.value)


def test_count_tokens_counts_what_will_be_sent(proxy_url, upstream):
    c = client(proxy_url)
    raw = c.messages.with_raw_response.count_tokens(model=MODEL, messages=history(), tools=TOOLS)
    assert raw.headers["x-offload-action"] == "compact"
    counted = raw.parse().input_tokens
    [rec] = [r for r in upstream.requests if r.path.endswith("/v1/messages/count_tokens")]
    assert_offloaded(rec)
    assert counted == len(rec.body) // 4 < len(json.dumps(history())) // 4
    assert not upstream.summary_requests() and not upstream.messages_requests()


def test_content_stays_in_its_namespace(proxy_url, upstream):
    upstream.handler = scripted(lambda rec: answer_like(rec, message(text(assert_offloaded(rec)))))
    ref = (
        client(proxy_url, key="sk-ant-owner-key")
        .messages.create(model=MODEL, max_tokens=64, messages=history(), tools=TOOLS)
        .content[0]
        .text
    )
    mine = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers={"x-api-key": "sk-ant-owner-key"}, timeout=20)
    assert mine.status_code == 200 and NEEDLE in mine.text
    theirs = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers={"x-api-key": "sk-ant-other-key"}, timeout=20)
    assert theirs.status_code == 404 and NEEDLE not in theirs.text
    bearer = httpx2.get(
        f"{proxy_url}/v1/offload/{ref}", headers={"authorization": "Bearer sk-ant-owner-key"}, timeout=20
    )
    assert bearer.status_code == 200  # the same credential as an OAuth-style bearer token: the same namespace


def test_proxy_keys_and_the_anthropic_upstream(make_proxy, upstream, tmp_path):
    """A proxy key on the Anthropic API: the operator's Anthropic key goes as x-api-key to the
    Anthropic upstream (here under a path of its own), for managed and relayed requests alike;
    on the OpenAI API the same key gets OpenAI's upstream and key."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[tenants.team-a]\napi_keys = ["pk-team-a-secret-0001"]\n')
    with make_proxy(
        anthropic_upstream=f"{upstream.url}/anth",
        anthropic_api_key="sk-ant-server",
        upstream_api_key="sk-openai-server",
        tenants_file=tenants,
    ) as url:
        c = anthropic.Anthropic(base_url=url, api_key="pk-team-a-secret-0001", max_retries=0, timeout=20)
        assert (
            c.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}]).content[0].text
            == "Hello there"
        )
        c.models.list()  # relayed: it carries anthropic-version
        c.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        paths = [r.path for r in upstream.requests]
        assert paths == ["/anth/v1/messages", "/anth/v1/models", "/anth/v1/messages/count_tokens"]
        for rec in upstream.requests:
            assert rec.headers["x-api-key"] == "sk-ant-server" and "authorization" not in rec.headers
            assert "pk-team-a" not in json.dumps(rec.headers)
        upstream.requests.clear()
        r = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": "Bearer pk-team-a-secret-0001"},
            timeout=20,
        )
        assert r.status_code == 200
        [rec] = upstream.requests
        assert rec.path == "/v1/chat/completions" and rec.headers["authorization"] == "Bearer sk-openai-server"
        assert "x-api-key" not in rec.headers
        # a client's own Anthropic key is refused: the proxy holds keys
        refused = httpx2.post(f"{url}/v1/messages", json={}, headers={"x-api-key": "sk-ant-someone"}, timeout=20)
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"


def test_metrics_name_the_anthropic_routes(proxy_url, upstream):
    c = client(proxy_url)
    c.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    c.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    text = httpx2.get(f"{proxy_url}/metrics", timeout=20).text
    for route in ("messages", "count_tokens"):
        assert f'offload_requests_total{{route="{route}",status="200"}}' in text, route


def test_count_tokens_is_not_counted_as_traffic(proxy_url, upstream):
    def tokens_total(text: str) -> float:
        return sum(
            float(line.split()[-1]) for line in text.splitlines() if line.startswith("offload_tokens_before_total")
        )

    before = tokens_total(httpx2.get(f"{proxy_url}/metrics", timeout=20).text)
    client(proxy_url).messages.count_tokens(model=MODEL, messages=history(), tools=TOOLS)
    assert tokens_total(httpx2.get(f"{proxy_url}/metrics", timeout=20).text) == before
