"""A lone surrogate (`"\\ud83d"`, escaped in the request's JSON: truncated tool output, a cut
emoji) in content the proxy stores comes back exactly as it came in: a compaction's record, a
summarised history behind its `ref=`, an offloaded tool result, the events, on every path that
writes one (issue 29, point 3: `json.dumps(ensure_ascii=False).encode()` failed on it, a 502
on every emulated compaction and on every later turn of that conversation)."""

from __future__ import annotations

import json
import uuid

import httpx2
import pytest

from proxy.core.compaction import PREFIX, is_ours
from tests.harness import anthropic as afake
from tests.harness import responses as fake
from tests.harness.requests import post
from tests.harness.servers import is_summary_call, scripted

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

LONE = "\ud83d"  # the first half of 😀, cut off
TASK = f"the task: fix {LONE} the build"
MODEL, CLAUDE = "gpt-5", "claude-sonnet-4-5"
HISTORY = [
    {"role": "user", "content": TASK},
    *[
        {"role": "assistant", "content": f"a{k} {LONE} " + " ".join(f"w{k}x{i}" for i in range(300))}
        if k % 2 == 0
        else {"role": "user", "content": f"u{k}: go on {LONE}"}
        for k in range(8)
    ],
    {"role": "user", "content": f"and now {LONE}?"},
]
THRESHOLD = [{"type": "compaction", "compact_threshold": 1000}]
COMPACT_EDIT = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 1000}}]}
TOOL_OUTPUT = "\n".join(f"line {i}: ok" if i != 5 else f"line 5: truncated {LONE}" for i in range(600))


@pytest.fixture(autouse=True)
def answers(upstream):
    """A model that reloads the first tool-result ref it is shown once, then answers."""

    def answer(rec):
        if afake.is_messages_create(rec):
            return afake.answer(rec, afake.message(afake.text("Done.")))
        items = fake.input_items(rec)
        last = items[-1] if items else {}
        refs = fake.refs_in_input(rec)
        if refs and "check line 5" in json.dumps(last):
            return fake.answer(rec, fake.function_call("context_reload", {"ref": refs[0]}, call_id="call_reload"))
        return fake.answer(rec, fake.message("Hello there"))

    upstream.handler = scripted(answer)


def read(raw: bytes) -> dict:
    return json.loads(raw.decode("utf-8"))  # strict: valid UTF-8, the surrogate escaped


def forwarded(upstream) -> list[dict]:
    """The bodies of the model requests the upstream got (not the summary calls)."""
    return [read(r.body) for r in upstream.requests if r.method == "POST" and not is_summary_call(r)]


def texts(value) -> list[str]:
    """Every string in `value`."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return []


def compaction_from(r: httpx2.Response, api: str, stream: bool) -> dict:
    if api == "messages":
        if stream:  # a compaction block streams empty, then whole in one compaction_delta
            delta = next(
                e["delta"]
                for e in afake.parse_sse(r.content)
                if e.get("type") == "content_block_delta" and e["delta"].get("type") == "compaction_delta"
            )
            return {"type": "compaction", "content": delta["content"], "encrypted_content": delta["encrypted_content"]}
        return next(b for b in r.json()["content"] if b.get("type") == "compaction")
    items = (
        r.json()["output"]
        if not stream
        else [e["item"] for e in fake.parse_sse(r.content) if e.get("type") == "response.output_item.done"]
    )
    return next(i for i in items if i.get("type") == "compaction")


def later_turn(url: str, api: str, compaction: dict, key: str) -> httpx2.Response:
    if api == "messages":
        return post(
            url,
            "/v1/messages",
            body={
                "model": CLAUDE,
                "max_tokens": 64,
                "context_management": COMPACT_EDIT,
                "messages": [
                    {"role": "assistant", "content": [compaction]},
                    {"role": "user", "content": f"next {LONE}"},
                ],
            },
            key=key,
        )
    return post(
        url,
        "/v1/responses",
        body={"model": MODEL, "input": [compaction, {"role": "user", "content": f"next {LONE}"}]},
        key=key,
    )


def compact_endpoint(url: str, key: str, stream: bool) -> httpx2.Response:
    return post(
        url,
        "/v1/responses/compact",
        body={"model": MODEL, "input": HISTORY},
        key=key,
        headers={"X-Offload-Session": "s-lone"},
    )


def responses_threshold(url: str, key: str, stream: bool) -> httpx2.Response:
    return post(
        url,
        "/v1/responses",
        body={"model": MODEL, "input": HISTORY, "context_management": THRESHOLD, "stream": stream},
        key=key,
    )


def messages_threshold(url: str, key: str, stream: bool) -> httpx2.Response:
    return post(
        url,
        "/v1/messages",
        body={
            "model": CLAUDE,
            "max_tokens": 64,
            "messages": HISTORY,
            "context_management": COMPACT_EDIT,
            "stream": stream,
        },
        key=key,
    )


@pytest.mark.parametrize(
    "api, compact, stream",
    [
        ("responses", compact_endpoint, False),
        ("responses", responses_threshold, False),
        ("responses", responses_threshold, True),
        ("messages", messages_threshold, False),
        ("messages", messages_threshold, True),
    ],
    ids=[
        "responses-compact",
        "responses-threshold",
        "responses-threshold-streamed",
        "messages-compact_20260112",
        "messages-compact_20260112-streamed",
    ],
)
def test_a_compaction_and_the_later_turns_keep_a_lone_surrogate(proxy_url, upstream, api, compact, stream):
    key = f"sk-{uuid.uuid4().hex}"
    r = compact(proxy_url, key, stream)
    assert r.status_code == 200, r.text[:500]
    r.content.decode("utf-8")  # strict
    compaction = compaction_from(r, api, stream)
    assert is_ours(compaction["encrypted_content"]) and compaction["encrypted_content"].startswith(PREFIX)
    if compact is compact_endpoint:  # the kept user messages, as they came in
        assert r.json()["output"][0]["content"][0]["text"] == TASK
    for _ in range(2):  # every later turn of the conversation: the record opens, the task exactly as sent
        upstream.requests.clear()
        again = later_turn(proxy_url, api, compaction, key)
        assert again.status_code == 200, again.text[:500]
        sent = forwarded(upstream)[0]
        stood_for = sent["messages"] if api == "messages" else sent["input"]
        assert TASK in texts(stood_for)
        assert f"next {LONE}" in texts(stood_for)
    if compact is compact_endpoint:  # its events, stored and listed
        events = httpx2.get(
            f"{proxy_url}/v1/offload/events",
            params={"session": "s-lone"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert events.status_code == 200, events.text
        assert "provider_compaction" in [e["type"] for e in events.json()["data"]]


def test_a_tool_result_offloaded_and_reloaded_keeps_a_lone_surrogate(proxy_url, upstream):
    key = f"sk-{uuid.uuid4().hex}"
    body = {
        "model": MODEL,
        "input": [
            {"role": "user", "content": TASK},
            {"type": "function_call", "call_id": "c1", "name": "build", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": TOOL_OUTPUT},
            {"role": "assistant", "content": "Built."},
            {"role": "user", "content": f"now check line 5 {LONE}"},
        ],
    }
    r = post(
        proxy_url,
        "/v1/responses",
        body=body,
        key=key,
        headers={
            "X-Offload-Mode": "compact",
            "X-Offload-Max-Total-Tokens": "100",
            "X-Offload-Max-Tool-Message-Tokens": "200",
            "X-Offload-Max-Reload-Tokens": "100000",
        },
    )
    assert r.status_code == 200, r.text[:500]
    first, second = forwarded(upstream)
    assert TOOL_OUTPUT not in texts(first["input"]) and TASK in texts(first["input"])  # offloaded, the task kept
    reloaded = second["input"][-1]
    assert reloaded["type"] == "function_call_output" and reloaded["call_id"] == "call_reload"
    assert reloaded["output"] == TOOL_OUTPUT  # byte for byte, the lone surrogate included
