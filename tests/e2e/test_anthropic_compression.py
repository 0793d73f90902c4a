"""Compression of an Anthropic conversation: the summary is asked of the Anthropic upstream with
the request's credential, in the conversation's own shape; it becomes a user-role block at the
start of the kept conversation (merged with a following user turn), never leaving a
`tool_result` whose `tool_use` was summarised; background summaries and fail-open as for the
other formats."""

from __future__ import annotations

import json
import re
import time
import uuid

import anthropic
import httpx2
import pytest
from starlette.responses import JSONResponse

from proxy.core.texts import SUMMARY_INSTRUCTION, refs_in
from tests.harness.anthropic import answer, is_messages_create, message, text, thinking, tool_use
from tests.harness.servers import default_handler, is_summary_call, snapshot_answer

MODEL = "claude-sonnet-4-5"
SYSTEM = [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}]
TOOLS = [
    {
        "name": "bash",
        "description": "Run a command.",
        "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    }
]
# compress only (no compaction): what is summarised is the history itself
INLINE = {
    "X-Offload-Mode": "compress",
    "X-Offload-Max-Total-Tokens": "1500",
    "X-Offload-Hard-Max-Tokens": "1",
    "X-Offload-Precompress-Ratio": "0",
}
SNAPSHOT = "<state_snapshot><task_overview>the plan so far</task_overview></state_snapshot>"


pytestmark = pytest.mark.usefixtures("fresh_summary_memory")


@pytest.fixture
def key() -> str:
    return f"sk-ant-{uuid.uuid4().hex}"


def output(step: int) -> str:
    return "\n".join(f"step{step} line {i}: value={i * 7} path=/src/mod{step}/file{i}.py status=ok" for i in range(40))


def conversation(steps: int) -> list[dict]:
    """user; `steps` × (assistant thinking + tool_use, user tool_result (+ a text block on every other)); user."""
    messages: list[dict] = [{"role": "user", "content": "Fix the failing build."}]
    for i in range(steps):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    thinking(f"Step {i}."),
                    text(f"Running step {i}."),
                    tool_use("bash", {"cmd": f"make step{i}"}, id=f"toolu_{i}"),
                ],
            }
        )
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": output(i)}
        messages.append({"role": "user", "content": [result, text("continue")] if i % 2 else [result]})
    messages.append({"role": "user", "content": "Where are we?"})
    return messages


def handler(calls: list, *, fail: bool = False):
    async def answer_(request, rec):
        if is_summary_call(rec):
            calls.append(rec)
            if fail:
                return JSONResponse(
                    {"type": "error", "error": {"type": "api_error", "message": "down"}}, status_code=500
                )
            return snapshot_answer(rec, SNAPSHOT, usage=(300, 40))
        if not is_messages_create(rec):  # e.g. the proxy asking GET /v1/models whether the key is good
            return await default_handler(request, rec)
        return answer(rec, message(text("Nearly there.")))

    return answer_


def client(proxy_url: str, key: str, headers: dict) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy_url, api_key=key, max_retries=0, timeout=20, default_headers=headers)


def tool_pairs_whole(messages: list[dict]) -> None:
    """Every tool_result answers a tool_use of the message just before it."""
    for k, m in enumerate(messages):
        blocks = m["content"] if isinstance(m["content"], list) else []
        for b in blocks:
            if b.get("type") == "tool_result":
                before = messages[k - 1]["content"] if k else []
                assert any(c.get("type") == "tool_use" and c["id"] == b["tool_use_id"] for c in before), b[
                    "tool_use_id"
                ]


def test_inline_summary_asked_of_the_anthropic_upstream_and_merged(proxy_url, upstream, key):
    calls: list = []
    upstream.handler = handler(calls)
    history = conversation(8)
    raw = client(proxy_url, key, INLINE).messages.with_raw_response.create(
        model=MODEL, max_tokens=2048, system=SYSTEM, tools=TOOLS, messages=history
    )
    assert raw.headers["x-offload-action"] == "compress"
    got = raw.parse()
    assert got.content[0].text == "Nearly there."
    assert got.usage.input_tokens == 10 + 300 and got.usage.output_tokens == 5 + 40  # the summary's tokens added

    [summary_call] = calls
    assert summary_call.path == "/v1/messages"
    sent_key = summary_call.headers.get("x-api-key") or summary_call.headers["authorization"].removeprefix("Bearer ")
    assert sent_key == key  # the request's own credential
    body = summary_call.json()
    assert body["system"] == SYSTEM and body["tools"][0] == TOOLS[0] and body["model"] == MODEL
    assert body.get("stream") is None and body["max_tokens"] > 0
    assert body["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": SUMMARY_INSTRUCTION}]}
    prefix = body["messages"][:-1]
    assert prefix == history[: len(prefix)]  # the conversation as sent, byte for byte

    [forwarded] = upstream.messages_requests()
    sent = forwarded.json()["messages"]
    assert sent[-1] == history[-1] and len(sent) < len(history)
    first = sent[0]
    assert first["role"] == "user"
    # the task stays, the summary after it in the same user message (roles alternate)
    assert first["content"][0] == {"type": "text", "text": history[0]["content"]}
    assert first["content"][1]["type"] == "text" and SNAPSHOT in first["content"][1]["text"]
    assert "ref=" in first["content"][1]["text"]
    assert not any(k.startswith("x-offload") for m in sent for k in m)
    assert not any(
        k.startswith("x-offload") for m in sent if isinstance(m["content"], list) for b in m["content"] for k in b
    )
    tool_pairs_whole(sent)
    # the kept part starts with the model's turn: the task and the summary are the user message before it
    assert len(first["content"]) == 2 and sent[1]["role"] == "assistant"

    # the originals stay retrievable under the summary's ref
    [ref] = refs_in(first["content"][1]["text"])
    stored = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers={"x-api-key": key}, timeout=20)
    assert stored.status_code == 200 and "make step0" in stored.text


def test_background_summary_then_reused_byte_identically(proxy_url, upstream, key):
    calls: list = []
    upstream.handler = handler(calls)
    background = {**INLINE, "X-Offload-Hard-Max-Tokens": "100000"}
    history = conversation(8)
    c = client(proxy_url, key, background)
    first = c.messages.with_raw_response.create(
        model=MODEL, max_tokens=2048, system=SYSTEM, tools=TOOLS, messages=history
    )
    assert first.headers["x-offload-action"] == "compress-pending"
    assert upstream.messages_requests()[0].json()["messages"] == history  # went out at once, whole
    deadline = time.monotonic() + 20
    while not calls and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(calls) == 1
    for _ in range(100):  # the summary lands in the store a moment after its call is answered
        second = c.messages.with_raw_response.create(
            model=MODEL, max_tokens=2048, system=SYSTEM, tools=TOOLS, messages=history
        )
        if second.headers["x-offload-action"] == "compress":
            break
        time.sleep(0.05)
    assert second.headers["x-offload-action"] == "compress"
    assert second.parse().usage.input_tokens == 10 + 300  # billed once, by the first response using it
    reused = upstream.messages_requests()[-1].json()["messages"]

    # the same history summarised inline, by another tenant: the same forwarded messages
    calls.clear()
    other = client(proxy_url, f"sk-ant-{uuid.uuid4().hex}", INLINE)
    other.messages.create(model=MODEL, max_tokens=2048, system=SYSTEM, tools=TOOLS, messages=history)
    assert len(calls) == 1
    inline = upstream.messages_requests()[-1].json()["messages"]

    def without_refs(messages: list[dict]) -> str:  # refs differ by namespace: compared with them taken out
        return re.sub(r"ref(=\\?\"?)[A-Za-z0-9_-]+", r"ref\1…", json.dumps(messages))

    assert "ref=…" in without_refs(reused) and without_refs(reused) == without_refs(inline)


def test_a_failing_summariser_never_fails_the_request(proxy_url, upstream, key):
    calls: list = []
    upstream.handler = handler(calls, fail=True)
    raw = client(proxy_url, key, INLINE).messages.with_raw_response.create(
        model=MODEL, max_tokens=2048, system=SYSTEM, tools=TOOLS, messages=conversation(8)
    )
    assert raw.status_code == 200 and raw.parse().content[0].text == "Nearly there."
    assert calls and "summar" in raw.headers["x-offload-warning"].lower()
    assert upstream.messages_requests()[-1].json()["messages"] == conversation(8)  # fail-open: as sent
