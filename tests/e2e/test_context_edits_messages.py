"""Anthropic's clearing edits emulated by the proxy (issue 22, part 2), through the anthropic SDK's
`beta.messages.create` / `beta.messages.stream` against the fake upstream (on loopback: emulated
by default): `clear_tool_uses_20250919` turns older tool results (and inputs) into reloadable
markers, `clear_thinking_20251015` removes older thinking, the upstream gets neither the
`context_management` field nor its beta, the client gets `context_management.applied_edits`, a
cleared result comes back byte for byte through `context_reload`; a bad config is a 400 in
Anthropic's shape; `count_tokens` tells the original count; with relay everything goes as sent."""

from __future__ import annotations

import json
import time
import uuid

import anthropic
import httpx2
import pytest

from proxy.core import texts
from proxy.core.texts import is_marker, refs_in
from tests.harness import anthropic as fake
from tests.harness.requests import post
from tests.harness.servers import scripted

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

MODEL = "claude-sonnet-4-5"
BETA_CLEAR = "context-management-2025-06-27"
OTHER_BETA = "files-api-2025-04-14"
# the proxy's own compaction stays out of the way: what is cleared here is the edits' doing
QUIET = {
    "X-Offload-Max-Tool-Message-Tokens": "100000",
    "X-Offload-Max-Total-Tokens": "1000000",
    "X-Offload-Max-Reload-Tokens": "50000",
}
TOOLS = [
    {"name": name, "description": "A tool.", "input_schema": {"type": "object", "properties": {}}}
    for name in ("bash", "read_spec")
]
CLEAR = {
    "type": "clear_tool_uses_20250919",
    "trigger": {"type": "input_tokens", "value": 2000},
    "keep": {"type": "tool_uses", "value": 2},
    "exclude_tools": ["read_spec"],
    "clear_tool_inputs": True,
}
THINK = {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}


def output(step: int) -> str:
    return "\n".join(
        f"step{step} line {i}: value={i * 7} path=/src/mod{step}/file{i}.py status=ok é" for i in range(60)
    )


def command(step: int) -> dict:
    return {"command": f"make test-{step} " + " ".join(f"--flag{step}-{k}" for k in range(120))}


def tool_turns(names: list[str]) -> list[dict]:
    out: list[dict] = [{"role": "user", "content": "Fix it."}]
    for i, name in enumerate(names):
        out.append(
            {
                "role": "assistant",
                "content": [fake.text(f"Step {i}."), fake.tool_use(name, command(i), id=f"toolu_{i}")],
            }
        )
        out.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": output(i)}]}
        )
    return out


def thinking_turns(count: int) -> list[dict]:
    out: list[dict] = []
    for t in range(count):
        out.append({"role": "user", "content": f"question {t}"})
        out.append(
            {
                "role": "assistant",
                "content": [
                    fake.thinking(f"deep thought {t} " * 40, signature=f"sig{t}"),
                    fake.redacted_thinking(f"redacted{t}" * 10),
                    fake.text(f"answer {t}"),
                ],
            }
        )
    out.append({"role": "user", "content": "and now?"})
    return out


def sdk(proxy_url: str, key: str, headers: dict | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy_url, api_key=key, max_retries=0, timeout=30, default_headers={**QUIET, **(headers or {})}
    )


@pytest.fixture
def key() -> str:
    return f"sk-ant-{uuid.uuid4().hex}"


def call(client: anthropic.Anthropic, stream: bool, **kwargs):
    """(the final message, the response headers), streamed or not."""
    kwargs = dict(model=MODEL, max_tokens=1024, **kwargs)
    if stream:
        with client.beta.messages.stream(**kwargs) as s:
            return s.get_final_message(), s.response.headers
    raw = client.beta.messages.with_raw_response.create(**kwargs)
    return raw.parse(), raw.headers


def results(messages: list[dict]) -> dict[str, str]:
    return {
        b["tool_use_id"]: b["content"]
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }


def inputs(messages: list[dict]) -> dict[str, dict]:
    return {
        b["id"]: b["input"]
        for m in messages
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    }


def events_of(proxy_url: str, key: str, kind: str) -> list[dict]:
    """The tenant's events of `kind` (recorded once the answer is out: waited for, a few seconds at most)."""
    for _ in range(100):
        data = httpx2.get(f"{proxy_url}/v1/offload/events", headers={"x-api-key": key}, timeout=10).json()["data"]
        found = [e for e in data if e["type"] == kind]
        if found:
            return found
        time.sleep(0.05)
    return []


@pytest.mark.parametrize("stream", [False, True])
def test_clear_tool_uses_markers_reload_byte_exact(proxy_url, upstream, key, stream):
    messages = [*tool_turns(["bash", "read_spec", "bash", "bash", "bash"]), {"role": "user", "content": "Status?"}]
    seen: dict[str, str] = {}

    def first(rec):
        sent = rec.json()
        assert "context_management" not in sent
        assert rec.headers["anthropic-beta"] == OTHER_BETA  # only the emulated beta left
        got, calls = results(sent["messages"]), inputs(sent["messages"])
        for i in range(5):  # 0 and 2 cleared (1: an excluded tool; 3, 4: the 2 kept)
            cleared = i in (0, 2)
            assert is_marker(got[f"toolu_{i}"]) is cleared and (got[f"toolu_{i}"] == output(i)) is not cleared
            assert (calls[f"toolu_{i}"] == command(i)) is not cleared
        seen["result"] = refs_in(got["toolu_0"])[0]
        seen["input"] = calls["toolu_2"][texts.CLEARED_INPUT_KEY].split("ref=")[1].split(".")[0]
        assert "context_reload" in [t["name"] for t in sent["tools"]]
        return fake.answer(
            rec,
            fake.message(
                fake.tool_use("context_reload", {"ref": seen["result"]}, id="r1"),
                fake.tool_use("context_reload", {"ref": seen["input"]}, id="r2"),
            ),
        )

    def second(rec):
        [reloaded, reloaded_input] = rec.json()["messages"][-1]["content"]
        assert reloaded["content"] == output(0)  # byte for byte
        assert json.loads(reloaded_input["content"]) == command(2)
        return fake.answer(rec, fake.message(fake.text("All green.")))

    upstream.handler = scripted(first, second)
    answer, headers = call(
        sdk(proxy_url, key),
        stream,
        messages=messages,
        tools=TOOLS,
        context_management={"edits": [CLEAR]},
        betas=[BETA_CLEAR, OTHER_BETA],
    )
    assert [b.text for b in answer.content if b.type == "text"] == ["All green."]
    [applied] = answer.context_management.applied_edits
    assert applied.type == "clear_tool_uses_20250919" and applied.cleared_tool_uses == 2
    assert applied.cleared_input_tokens > 1000
    assert headers["x-offload-action"] == "context-edits"
    assert len(upstream.messages_requests()) == 2
    [edit] = events_of(proxy_url, key, "context_edit")
    assert edit["edits"] == [applied.model_dump()]


@pytest.mark.parametrize("stream", [False, True])
def test_clear_thinking_keeps_the_last_turns(proxy_url, upstream, key, stream):
    messages = thinking_turns(3)
    upstream.handler = scripted(lambda rec: fake.answer(rec, fake.message(fake.text("ok"))))
    answer, headers = call(
        sdk(proxy_url, key),
        stream,
        messages=messages,
        context_management={"edits": [THINK, {**CLEAR, "trigger": {"type": "tool_uses", "value": 1}}]},
        betas=[BETA_CLEAR],
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    sent = upstream.messages_requests()[0].json()["messages"]
    kinds = [[b["type"] for b in m["content"]] for m in sent if m["role"] == "assistant"]
    assert kinds == [["text"], ["text"], ["thinking", "redacted_thinking", "text"]]
    assert sent[-2] == messages[-2] and "anthropic-beta" not in upstream.messages_requests()[0].headers
    [applied] = [e.model_dump() for e in answer.context_management.applied_edits]  # no tool use: nothing cleared
    assert applied["type"] == "clear_thinking_20251015" and applied["cleared_thinking_turns"] == 2
    assert applied["cleared_input_tokens"] > 100 and headers["x-offload-action"] == "context-edits"


@pytest.mark.parametrize("stream", [False, True])
def test_not_triggered_nothing_cleared_and_the_answer_says_so(proxy_url, upstream, key, stream):
    messages = [*tool_turns(["bash", "bash"]), {"role": "user", "content": "Status?"}]
    upstream.handler = scripted(lambda rec: fake.answer(rec, fake.message(fake.text("ok"))))
    answer, headers = call(
        sdk(proxy_url, key),
        stream,
        messages=messages,
        tools=TOOLS,
        betas=[BETA_CLEAR],
        context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
    )  # 100,000 tokens
    assert answer.context_management.applied_edits == [] and headers["x-offload-action"] == "none"
    sent = upstream.messages_requests()[0].json()
    assert sent["messages"] == messages and "context_management" not in sent


EDITING = {"anthropic-beta": BETA_CLEAR, **QUIET}  # what a client of context editing sends with each request


@pytest.mark.parametrize(
    "config, says",
    [
        ({"edits": [CLEAR, THINK]}, "must come first"),
        ({"edits": [{"type": "clear_everything_20990101"}]}, "unknown edit type"),
        ({"edits": [{**CLEAR, "keep": {"type": "tool_uses", "value": -1}}]}, "keep.value"),
        ({"edits": [{**THINK, "keep": {"type": "thinking_turns", "value": "1"}}]}, "expected an integer"),
        ({"edits": "clear"}, "context_management.edits"),
        ({"edits": [THINK] * 10_000}, "at most"),
        ({"edits": [THINK] * 17}, "at most 16"),
    ],
)
def test_a_bad_config_is_a_400_in_anthropics_shape(proxy_url, upstream, key, config, says):
    body = {"model": MODEL, "max_tokens": 10, "messages": thinking_turns(1), "context_management": config}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = post(proxy_url, path, body=body, key=key, headers=EDITING)
        assert r.status_code == 400, r.text
        error = r.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        assert says in error["error"]["message"]
    assert upstream.messages_requests() == []


def test_count_tokens_counts_the_edited_request_and_tells_the_original(proxy_url, upstream, key):
    messages = [*tool_turns(["bash", "read_spec", "bash", "bash", "bash"]), {"role": "user", "content": "Status?"}]
    body = {"model": MODEL, "messages": messages, "tools": TOOLS, "context_management": {"edits": [CLEAR]}}
    r = post(proxy_url, "/v1/messages/count_tokens", body=body, key=key, headers=EDITING)
    assert r.status_code == 200, r.text
    [counted] = [rec for rec in upstream.requests if rec.path.endswith("/count_tokens")]
    assert "context_management" not in counted.json() and len(counted.body) < len(json.dumps(body)) - 5000
    answer = r.json()
    assert answer["input_tokens"] == len(counted.body) // 4  # the fake's count of what it got
    assert answer["context_management"]["original_input_tokens"] > answer["input_tokens"] + 1000
    assert r.headers["x-offload-action"] == "context-edits"
    upstream.requests.clear()
    plain = post(
        proxy_url,
        "/v1/messages/count_tokens",
        key=key,
        headers=EDITING,
        body={k: v for k, v in body.items() if k != "context_management"},
    )
    assert "context_management" not in plain.json()


@pytest.mark.parametrize("stream", [False, True])
def test_relay_to_a_native_upstream_byte_for_byte(proxy_url, upstream, key, stream):
    """A native upstream applies the edits itself: field, beta and its applied_edits go as they are."""
    upstream.handler = scripted(lambda rec: fake.native_answer(rec))
    messages = [*thinking_turns(2)[:-1], *tool_turns(["bash"])]
    body = {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": messages,
        "tools": TOOLS,
        "stream": stream,
        "context_management": {"edits": [THINK, CLEAR]},
    }
    raw = json.dumps(body, separators=(",", ":")).encode()
    r = post(
        proxy_url,
        "/v1/messages",
        body=raw,
        key=key,
        headers={
            **EDITING,
            "anthropic-beta": f"{BETA_CLEAR},{OTHER_BETA}",
            "X-Offload-Context-Management": "relay",
            "X-Offload-Cache-Control": "off",
        },
    )  # nor prompt caching added: the bytes as sent
    assert r.status_code == 200, r.text
    [forwarded] = upstream.messages_requests()
    assert forwarded.body == raw and forwarded.headers["anthropic-beta"] == f"{BETA_CLEAR},{OTHER_BETA}"
    applied = {"applied_edits": [fake.APPLIED_CLEAR, fake.APPLIED_THINKING]}
    if stream:
        [delta] = [e for e in fake.parse_sse(r.content) if e["type"] == "message_delta"]
        assert delta["context_management"] == applied
    else:
        assert r.json()["context_management"] == applied
    assert r.headers["x-offload-action"] == "none"


@pytest.mark.parametrize("stream", [False, True])
def test_with_a_paused_emulated_compaction_the_answer_carries_the_applied_edits(proxy_url, upstream, key, stream):
    """Clearing first, then compact_20260112 folds what is left and pauses: no turn upstream,
    the compaction block alone, and the clearing edits in `applied_edits`."""
    messages = [*tool_turns(["bash", "read_spec", "bash", "bash", "bash"]), {"role": "user", "content": "Status?"}]
    upstream.handler = scripted(lambda rec: fake.answer(rec, fake.message(fake.text("not asked"))))
    compact = {
        "type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 1000},
        "pause_after_compaction": True,
    }
    answer, headers = call(
        sdk(proxy_url, key),
        stream,
        messages=messages,
        tools=TOOLS,
        context_management={"edits": [THINK, CLEAR, compact]},
        betas=[BETA_CLEAR, "compact-2026-01-12"],
    )
    assert answer.stop_reason == "compaction" and [b.type for b in answer.content] == ["compaction"]
    [applied] = answer.context_management.applied_edits
    assert applied.type == "clear_tool_uses_20250919" and applied.cleared_tool_uses == 2
    assert upstream.messages_requests() == [] and "context-edits" in headers["x-offload-action"]
    assert "emulated-compaction" in headers["x-offload-action"]
