"""Anthropic's own context management through the proxy's `POST /v1/messages` (issue 22, part 1):
`context_management` and `anthropic-beta` relayed byte for byte; with `clear_tool_uses_20250919`
the proxy compacts only the tool results the edit leaves; with `compact_20260112` it never
compresses; a `compaction` block's message is never summarised nor moved, and what precedes it
is neither counted nor summarised; the provider's `applied_edits` and `compaction` block reach the
client unchanged (streamed or not, with the reload loop or not), through the anthropic SDK."""

from __future__ import annotations

import json
import uuid

import anthropic
import pytest

from proxy.core.texts import refs_in
from tests.harness import anthropic as fake
from tests.harness.requests import post
from tests.harness.servers import scripted

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

MODEL = "claude-sonnet-4-5"
INLINE = {
    "X-Offload-Max-Total-Tokens": "1500",
    "X-Offload-Hard-Max-Tokens": "1",
    "X-Offload-Precompress-Ratio": "0",
    "X-Offload-Max-Tool-Message-Tokens": "300",
}
BETA_CLEAR = "context-management-2025-06-27"
BETA_COMPACT = "compact-2026-01-12"
CLEAR = {
    "edits": [
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 30000},
            "keep": {"type": "tool_uses", "value": 2},
            "exclude_tools": ["read_spec"],
        }
    ]
}
COMPACT = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50000}}]}
TOOLS = [
    {"name": name, "description": "A tool.", "input_schema": {"type": "object", "properties": {}}}
    for name in ("bash", "read_spec")
]
CLIENT_BLOCK = {
    "type": "compaction",
    "content": "Earlier: the build was fixed; now the tests.",
    "encrypted_content": "EpYBCkYIBxgCKkDclient/compaction+state==",
}


def output(step: int) -> str:
    return "\n".join(f"step{step} line {i}: value={i * 7} path=/src/mod{step}/file{i}.py status=ok" for i in range(60))


def tool_turns(names: list[str]) -> list[dict]:
    out: list[dict] = []
    for i, name in enumerate(names):
        out.append(
            {"role": "assistant", "content": [fake.text(f"Step {i}."), fake.tool_use(name, {}, id=f"toolu_{i}")]}
        )
        out.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": output(i)}]}
        )
    return out


def chat(label: str, turns: int) -> list[dict]:
    out = []
    for k in range(turns):
        out.append(
            {"role": "user", "content": f"{label} question {k}: " + " ".join(f"{label}{k}w{j}" for j in range(250))}
        )
        out.append(
            {"role": "assistant", "content": f"{label} answer {k}: " + " ".join(f"{label}{k}a{j}" for j in range(250))}
        )
    return out


def compact_json(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


# the fake upstream plays Anthropic's own API, which applies context management itself
RELAY = {"X-Offload-Context-Management": "relay"}


def sdk(proxy_url: str, key: str, headers: dict) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy_url, api_key=key, max_retries=0, timeout=30, default_headers={**RELAY, **headers}
    )


@pytest.fixture
def key() -> str:
    return f"sk-ant-{uuid.uuid4().hex}"


@pytest.fixture(autouse=True)
def native(upstream):
    """A "native" upstream: Anthropic's answers to its own context management; summaries answered."""
    upstream.handler = scripted(
        lambda rec: fake.native_answer(rec) or fake.answer(rec, fake.message(fake.text("Hello there")))
    )


def result_texts(messages: list[dict]) -> dict[str, str]:
    return {
        b["tool_use_id"]: b["content"]
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }


@pytest.mark.parametrize("mode", ["auto", "compact", "compress"])
@pytest.mark.parametrize("stream", [False, True])
def test_clear_tool_uses_the_proxy_compacts_only_what_the_edit_leaves(proxy_url, upstream, key, mode, stream):
    messages = [
        {"role": "user", "content": "Fix it."},
        *tool_turns(["bash", "read_spec", "bash", "bash", "bash"]),
        {"role": "user", "content": "Where are we?"},
    ]
    client = sdk(proxy_url, key, {**INLINE, "X-Offload-Mode": mode})
    kwargs = dict(
        model=MODEL, max_tokens=1024, messages=messages, tools=TOOLS, context_management=CLEAR, betas=[BETA_CLEAR]
    )
    if stream:
        with client.beta.messages.stream(**kwargs) as s:
            answer = s.get_final_message()
    else:
        answer = client.beta.messages.create(**kwargs)
    assert answer.context_management.applied_edits[0].model_dump() == fake.APPLIED_CLEAR
    forwarded = upstream.messages_requests()[0]
    assert forwarded.headers["anthropic-beta"] == BETA_CLEAR
    assert b'"context_management":' + compact_json(CLEAR) in forwarded.body
    results = result_texts(forwarded.json()["messages"])
    # the edit may clear toolu_0 and toolu_2 (toolu_1 is an excluded tool, toolu_3/4 the 2 kept):
    # the proxy leaves those to the provider, verbatim, and compacts the others (in auto, the
    # older part is summarised too: the summary, reloadable, leaves the provider nothing to clear there)
    for call, text in results.items():
        clearable = call in ("toolu_0", "toolu_2")
        if clearable or mode == "compress":
            assert text == output(int(call[-1])), call
        else:
            assert refs_in(text), call
    assert "toolu_4" in results
    if mode == "compact":
        assert set(results) == {f"toolu_{i}" for i in range(5)}


@pytest.mark.parametrize("stream", [False, True])
def test_compact_edit_no_compression_and_the_block_reaches_the_client(proxy_url, upstream, key, stream):
    messages = [
        *chat("old", 4),
        {"role": "user", "content": "continue"},
        {"role": "assistant", "content": [CLIENT_BLOCK, fake.text("Going on.")]},
        *chat("new", 4),
        {"role": "user", "content": "next?"},
    ]
    body = {"model": MODEL, "max_tokens": 1024, "messages": messages, "context_management": COMPACT, "stream": stream}
    r = post(
        proxy_url,
        "/v1/messages",
        body=compact_json(body),
        key=key,
        headers={
            **RELAY,
            **INLINE,
            "X-Offload-Mode": "compress",
            "anthropic-beta": BETA_COMPACT,
            "X-Offload-Cache-Control": "off",
        },
    )  # nor prompt caching added: the bytes as sent
    assert r.status_code == 200, r.text
    assert r.headers["x-offload-action"] == "none" and not upstream.summary_requests()
    forwarded = upstream.messages_requests()[0]
    assert forwarded.body == compact_json(body)  # byte for byte
    assert forwarded.headers["anthropic-beta"] == BETA_COMPACT
    if stream:
        events = fake.parse_sse(r.content)
        starts = [e for e in events if e["type"] == "content_block_start"]
        assert starts[0]["index"] == 0 and starts[0]["content_block"]["type"] == "compaction"
        delta = next(e for e in events if e["type"] == "content_block_delta")["delta"]
        assert delta["encrypted_content"] == fake.COMPACTION_BLOCK["encrypted_content"]
        assert next(e for e in events if e["type"] == "message_delta")["context_management"] == {"applied_edits": []}
    else:
        assert r.json()["content"][0] == fake.COMPACTION_BLOCK


@pytest.mark.parametrize("stream", [False, True])
def test_compaction_block_through_the_reload_loop_with_the_sdk(proxy_url, upstream, key, stream):
    """A large tool result after the client's compaction block is compacted (the reload tools go
    up, the answer is rewritten): the provider's block, `stop_reason: compaction` and applied
    edits still reach the client unchanged."""
    messages = [
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": [CLIENT_BLOCK]},
        *tool_turns(["bash"]),
        {"role": "user", "content": "Where are we?"},
    ]
    edits = {
        "edits": [
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
            {"type": "compact_20260112", "pause_after_compaction": True},
        ]
    }
    client = sdk(proxy_url, key, {**INLINE, "X-Offload-Mode": "auto", "X-Offload-Max-Total-Tokens": "300"})
    kwargs = dict(
        model=MODEL,
        max_tokens=1024,
        messages=messages,
        tools=TOOLS,
        context_management=edits,
        betas=[BETA_CLEAR, BETA_COMPACT],
    )
    if stream:
        with client.beta.messages.stream(**kwargs) as s:
            answer = s.get_final_message()
    else:
        answer = client.beta.messages.create(**kwargs)
    assert answer.stop_reason == "compaction"
    assert answer.content[0].model_dump(exclude_none=True) == fake.COMPACTION_BLOCK
    assert [e.model_dump() for e in answer.context_management.applied_edits] == [fake.APPLIED_THINKING]
    forwarded = upstream.messages_requests()[0]
    assert forwarded.headers["anthropic-beta"] == f"{BETA_CLEAR},{BETA_COMPACT}"
    sent = forwarded.json()
    assert sent["context_management"] == edits and "context_reload" in [t["name"] for t in sent["tools"]]
    assert sent["messages"][:2] == messages[:2]  # the block's message verbatim, in place
    assert compact_json(CLIENT_BLOCK) in forwarded.body
    assert refs_in(result_texts(sent["messages"])["toolu_0"])


def test_compaction_block_without_the_edit_the_summary_comes_after_it(proxy_url, upstream, key):
    """A client that sends the block back without the edit (the proxy does compress): what
    precedes the block is neither counted nor summarised, the summary opens the turn after it."""
    before = [
        *chat("old", 4),
        {"role": "user", "content": "continue"},
        {"role": "assistant", "content": [CLIENT_BLOCK, fake.text("Going on.")]},
    ]
    messages = [*before, *chat("new", 4), {"role": "user", "content": "next?"}]
    r = post(
        proxy_url,
        "/v1/messages",
        body=compact_json({"model": MODEL, "max_tokens": 1024, "messages": messages}),
        key=key,
        headers={**RELAY, **INLINE, "X-Offload-Mode": "compress"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-offload-action"] == "compress"
    sent = upstream.messages_requests()[-1].json()["messages"]
    assert sent[: len(before)] == before
    summary = sent[len(before)]["content"][0]["text"]
    assert refs_in(summary) and "old" not in json.dumps(sent[len(before) :])
    small = [*before, *chat("new", 1), {"role": "user", "content": "next?"}]  # 3000 words before, 500 after
    r = post(
        proxy_url,
        "/v1/messages",
        body=compact_json({"model": MODEL, "max_tokens": 1024, "messages": small}),
        key=key,
        headers={**RELAY, **INLINE, "X-Offload-Mode": "compress"},
    )
    assert r.headers["x-offload-action"] == "none"
