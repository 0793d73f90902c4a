"""The summary call as the upstream receives it (`--summary-request`): in the prefix shape, the
conversation exactly as the previous turn forwarded it (its messages or input items, its tools,
the injected ones included), then the instruction, on the request's own endpoint; in the
transcript shape, the old system prompt and transcript on chat completions. Either way with the
caller's own upstream credential and base URL."""

from __future__ import annotations

import json

import httpx2
import pytest
from starlette.responses import JSONResponse

from proxy.core.texts import RELOAD_TOOL_SCHEMAS, SUMMARY_INSTRUCTION
from tests.harness.history import agent_history, big_text
from tests.harness.requests import post
from tests.harness.responses import answer, function_call, function_call_output, message
from tests.harness.servers import completion, is_summary_call, snapshot_answer, summary_shape

# Compaction, then a summary made inline (the turn waits for it) once the compacted history passes 2000 tokens.
HEADERS = {
    "X-Offload-Mode": "auto",
    "X-Offload-Max-Total-Tokens": "2000",
    "X-Offload-Hard-Max-Tokens": "1",
    "X-Offload-Precompress-Ratio": "0",
}
CHAT_TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]
RESPONSES_TOOLS = [
    {"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {}}, "strict": False}
]
INJECTED = [s["function"]["name"] for s in RELOAD_TOOL_SCHEMAS]
PADDING = [
    m
    for i in range(10)
    for m in (
        {"role": "assistant", "content": f"Step {i}: " + "I looked at the module and changed the parser. " * 12},
        {"role": "user", "content": f"Go on with step {i + 1}."},
    )
]


def chat_turns() -> tuple[list[dict], list[dict]]:
    """Turn 1: tool results to compact, under the trigger once compacted; turn 2: past it."""
    first = agent_history(steps=4) + [
        {"role": "assistant", "content": "Read all four."},
        {"role": "user", "content": "Go on."},
    ]
    return first, first + PADDING


def responses_turns() -> tuple[list[dict], list[dict]]:
    items: list[dict] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]}]
    for i in range(4):
        items += [
            function_call("bash", {"cmd": f"cat f{i}"}, call_id=f"call_{i}", id=f"fc_{i}"),
            function_call_output(f"call_{i}", big_text(f"step{i}")),
        ]
    items += [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Read all four."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go on."}]},
    ]
    padding = [{"role": m["role"], "content": m["content"]} for m in PADDING]
    return items, items + padding


async def handler(request, rec):
    if is_summary_call(rec):
        return snapshot_answer(rec)
    if rec.path.endswith("/chat/completions"):
        return JSONResponse(completion("Final answer"))
    return answer(rec, message("fine"))


def turn(url: str, fmt: str, history: list[dict], key: str, headers: dict | None = None) -> httpx2.Response:
    if fmt == "chat":
        body = {
            "model": "gpt-4o",
            "messages": history,
            "tools": CHAT_TOOLS,
            "temperature": 0.3,
            "prompt_cache_key": "conv-7",
        }
    else:
        body = {
            "model": "gpt-5",
            "instructions": "You are a coding agent.",
            "input": history,
            "tools": RESPONSES_TOOLS,
            "reasoning": {"effort": "low"},
            "prompt_cache_key": "conv-7",
        }
    path = "chat/completions" if fmt == "chat" else "responses"
    r = post(url, f"/v1/{path}", json=body, key=key, headers={**HEADERS, **(headers or {})}, timeout=30)
    assert r.status_code == 200, r.text
    return r


def model_requests(upstream) -> list:
    return [
        r
        for r in upstream.requests
        if r.method == "POST" and not is_summary_call(r) and r.path.endswith(("/chat/completions", "/responses"))
    ]


@pytest.mark.parametrize("fmt", ["chat", "responses"])
def test_the_summary_call_is_the_previous_turn_then_the_instruction(make_proxy, upstream, fmt):
    upstream.handler = handler
    first, second = chat_turns() if fmt == "chat" else responses_turns()
    history = "messages" if fmt == "chat" else "input"
    with make_proxy() as url:  # --summary-request prefix, the default
        r = turn(url, fmt, first, "sk-prefix-" + fmt)
        assert r.headers["x-offload-action"] == "compact"
        [previous] = model_requests(upstream)
        r = turn(url, fmt, second, "sk-prefix-" + fmt)
        assert r.headers["x-offload-action"] == "compact+compress"
    [call] = upstream.summary_requests()
    assert summary_shape(call) == "prefix"
    assert call.path == ("/v1/chat/completions" if fmt == "chat" else "/v1/responses")
    sent, asked = previous.json(), call.json()
    # byte for byte what the previous turn forwarded, then the instruction
    assert json.dumps(asked[history][: len(sent[history])]) == json.dumps(sent[history])
    assert "ref=" in json.dumps(sent[history])  # compacted results: the turn carried the reload tools
    assert json.dumps(asked["tools"]) == json.dumps(sent["tools"])
    names = [t["function"]["name"] if fmt == "chat" else t["name"] for t in asked["tools"]]
    assert names == ["bash", *INJECTED]
    assert asked["tool_choice"] == "none" and asked["stream"] is False and asked["prompt_cache_key"] == "conv-7"
    if fmt == "chat":
        assert asked[history][-1] == {"role": "user", "content": SUMMARY_INSTRUCTION}
        assert asked["temperature"] == 0.3 and asked["model"] == "gpt-4o"
    else:
        assert asked[history][-1] == {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": SUMMARY_INSTRUCTION}],
        }
        assert asked["store"] is False and asked["background"] is False
        assert asked["instructions"] == "You are a coding agent." and asked["reasoning"] == {"effort": "low"}
    # the turn that waited for it forwards the snapshot in place of what it covered
    last = model_requests(upstream)[-1].json()[history]
    assert "the plan so far" in json.dumps(last[:3]) and len(last) < len(second)  # after the task


@pytest.mark.parametrize("fmt", ["chat", "responses"])
def test_the_transcript_shape_goes_to_chat_completions_as_before(make_proxy, upstream, fmt):
    upstream.handler = handler
    first, second = chat_turns() if fmt == "chat" else responses_turns()
    with make_proxy(summary_request="transcript") as url:
        turn(url, fmt, first, "sk-transcript-" + fmt)
        r = turn(url, fmt, second, "sk-transcript-" + fmt)
        assert r.headers["x-offload-action"] == "compact+compress"
    [call] = upstream.summary_requests()
    assert summary_shape(call) == "transcript" and call.path == "/v1/chat/completions"
    asked = call.json()
    assert set(asked) == {"model", "messages"} and asked["model"] == ("gpt-4o" if fmt == "chat" else "gpt-5")
    assert "[offloaded tool result" in asked["messages"][1]["content"]  # the compacted history, rendered


@pytest.mark.parametrize("fmt", ["chat", "responses"])
def test_the_summary_call_uses_the_callers_credential_and_upstream(make_proxy, upstream, tmp_path, fmt):
    """A tenant with an upstream key of its own: its key and its upstream, never the server's; a
    client's own key to the upstream it named (allowlisted): that key, that upstream."""
    upstream.handler = handler
    port = upstream.url.rsplit(":", 1)[1]
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        f'[tenants.own]\napi_keys = ["pk-own-tenant-key-0001"]\n'
        f'upstream_api_key = "sk-own-upstream"\nupstream = "http://localhost:{port}/own/v1"\n'
    )
    first, second = chat_turns() if fmt == "chat" else responses_turns()
    with make_proxy(upstream_api_key="sk-server", tenants_file=tenants) as url:
        turn(url, fmt, first, "pk-own-tenant-key-0001")
        turn(url, fmt, second, "pk-own-tenant-key-0001")
    [call] = upstream.summary_requests()
    assert call.path.startswith("/own/v1/") and call.headers["host"] == f"localhost:{port}"
    for rec in upstream.requests:
        assert rec.path.startswith("/own/v1/")
        assert rec.all("authorization") == ["Bearer sk-own-upstream"], rec.path
        assert "sk-server" not in json.dumps(rec.header_list) and "pk-own" not in json.dumps(rec.header_list)

    upstream.requests.clear()
    with make_proxy(upstream_allowlist=f"localhost:{port}") as url:
        named = {"X-Offload-Upstream": f"http://localhost:{port}/client/v1"}
        turn(url, fmt, first, "sk-client-own-key", named)
        turn(url, fmt, second, "sk-client-own-key", named)
    [call] = upstream.summary_requests()
    assert call.path.startswith("/client/v1/") and call.all("authorization") == ["Bearer sk-client-own-key"]
    assert not [k for k, _ in call.header_list if k.startswith("x-offload")]
