"""Anthropic's `compact_20260112` emulated by the proxy for an upstream without it (issue 22,
part 2): over the trigger the proxy summarises in the turn, forwards the reduced history, and the
answer (streamed or not, through the anthropic SDK) opens with a `compaction` block holding its
summary (marker line with `ref=`) and its token; `pause_after_compaction` answers that block
alone with no upstream turn; a later request holding the block is forwarded from it on; the
context-management betas are not sent upstream; `count_tokens` counts what would be forwarded.
Malformed edits and blocks are refused with a 400."""

from __future__ import annotations

import json
import uuid

import anthropic
import httpx2
import pytest

from proxy.core.compaction import is_ours
from proxy.core.texts import refs_in
from tests.harness import anthropic as fake
from tests.harness.requests import post
from tests.harness.servers import SUMMARY_TEXTS, is_summary_call, scripted, snapshot_answer

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

MODEL = "claude-sonnet-4-5"
BETA = "compact-2026-01-12"


def edit(**fields) -> dict:
    return {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 1000}, **fields}]}


def words(label: str, n: int) -> str:
    return f"{label}: " + " ".join(f"{label}w{k}" for k in range(n))


HISTORY = [
    {"role": "user", "content": "the task: fix the build"},
    *[
        {"role": "assistant", "content": words(f"a{k}", 300)}
        if k % 2 == 0
        else {"role": "user", "content": f"u{k}: go on"}
        for k in range(8)
    ],
    {"role": "user", "content": "and now?"},
]


@pytest.fixture
def key() -> str:
    return f"sk-ant-{uuid.uuid4().hex}"


@pytest.fixture(autouse=True)
def answers(upstream):
    upstream.handler = scripted(lambda rec: fake.answer(rec, fake.message(fake.text("Done."))))


def client(proxy_url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy_url, api_key=key, max_retries=0, timeout=30)


@pytest.mark.parametrize("stream", [False, True])
def test_over_the_trigger_the_answer_opens_with_the_compaction_block(proxy_url, upstream, key, stream):
    c = client(proxy_url, key)
    kwargs = dict(model=MODEL, max_tokens=512, messages=HISTORY, context_management=edit(), betas=[BETA, "other-beta"])
    if stream:
        with c.beta.messages.stream(**kwargs) as s:
            kinds = [e.type for e in s]
            message = s.get_final_message()
        assert "compaction" in kinds  # the SDK's own compaction event: the block streamed as Anthropic does
    else:
        message = c.beta.messages.create(**kwargs)
    assert [b.type for b in message.content] == ["compaction", "text"]
    block = message.content[0]
    assert refs_in(block.content) and is_ours(block.encrypted_content)
    assert message.content[1].text == "Done." and message.stop_reason == "end_turn"
    assert message.usage.input_tokens >= 300  # the summary's usage is counted in
    forwarded = upstream.messages_requests()[0]
    assert "context_management" not in forwarded.json()
    assert forwarded.headers.get("anthropic-beta") == "other-beta"  # only the emulated betas left out
    sent = forwarded.json()["messages"]
    # one user message: the task, the summary (the block's content), the kept user messages, the new turn
    assert [b["text"] for b in sent[0]["content"]] == [
        "the task: fix the build",
        block.content,
        "u1: go on",
        "u3: go on",
        "u5: go on",
        "u7: go on",
        "and now?",
    ]
    assert "a0w1" not in json.dumps(sent) and len(sent) == 1

    # next turn: the client keeps the answer from the compaction block on
    kept = {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]}
    second = c.beta.messages.create(
        model=MODEL,
        max_tokens=512,
        messages=[kept, {"role": "user", "content": "next"}],
        context_management=edit(),
        betas=[BETA],
    )
    assert [b.type for b in second.content] == ["text"]
    assert len(upstream.summary_requests()) == 1  # nothing summarised twice
    seen = upstream.messages_requests()[-1].json()["messages"]
    assert seen[: len(sent)] == sent  # what the compaction forwarded, then the answer and the new turn
    assert seen[len(sent) :] == [
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"role": "user", "content": "next"},
    ]
    assert "anthropic-beta" not in upstream.messages_requests()[-1].headers


@pytest.mark.parametrize("stream", [False, True])
def test_pause_after_compaction_answers_the_block_alone_without_a_turn(proxy_url, upstream, key, stream):
    c = client(proxy_url, key)
    kwargs = dict(
        model=MODEL,
        max_tokens=512,
        messages=HISTORY,
        context_management=edit(pause_after_compaction=True),
        betas=[BETA],
    )
    if stream:
        with c.beta.messages.stream(**kwargs) as s:
            message = s.get_final_message()
    else:
        message = c.beta.messages.create(**kwargs)
    assert [b.type for b in message.content] == ["compaction"] and message.stop_reason == "compaction"
    assert refs_in(message.content[0].content)
    assert message.usage.input_tokens == 300 and message.usage.output_tokens == 40  # the summary's own
    assert not upstream.messages_requests() and len(upstream.summary_requests()) == 1
    # continuing: the block's message last, the model answers from the summary on
    kept = {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]}
    after = c.beta.messages.create(
        model=MODEL, max_tokens=512, messages=[*HISTORY, kept], context_management=edit(), betas=[BETA]
    )
    assert [b.type for b in after.content] == ["text"]
    seen = upstream.messages_requests()[-1].json()["messages"]
    assert seen[-1]["content"][-1]["text"] == "and now?" and len(upstream.summary_requests()) == 1
    assert refs_in(seen[-1]["content"][1]["text"]) and "a0w1" not in json.dumps(seen)


def test_instructions_replace_the_summary_instruction(proxy_url, upstream, key):
    custom = "Summarise only the decisions."

    async def handler(request, rec):
        if is_summary_call(rec, (*SUMMARY_TEXTS, custom)):
            return snapshot_answer(rec)
        return fake.answer(rec, fake.message(fake.text("Done.")))

    upstream.handler = handler
    r = post(
        proxy_url,
        "/v1/messages",
        body={"max_tokens": 512, "model": MODEL, "messages": HISTORY, "context_management": edit(instructions=custom)},
        key=key,
    )
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["type"] == "compaction"
    [summary_call] = [rec for rec in upstream.requests if is_summary_call(rec, (custom,))]
    assert summary_call.json()["messages"][-1]["content"][-1]["text"] == custom


def test_a_block_not_made_by_the_proxy_becomes_text_and_what_precedes_it_is_dropped(proxy_url, upstream, key):
    block = {"type": "compaction", "content": "Earlier: the build was fixed.", "encrypted_content": "EpYBnative=="}
    messages = [
        *HISTORY,
        {"role": "assistant", "content": [block, {"type": "text", "text": "Fixed."}]},
        {"role": "user", "content": "next"},
    ]
    r = post(proxy_url, "/v1/messages", body={"max_tokens": 512, "model": MODEL, "messages": messages}, key=key)
    assert r.status_code == 200, r.text
    assert upstream.messages_requests()[0].json()["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Earlier: the build was fixed."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]},
        {"role": "user", "content": "next"},
    ]
    # counted as forwarded
    upstream.handler = lambda request, rec: _count(rec)
    c = post(proxy_url, "/v1/messages/count_tokens", body={"model": MODEL, "messages": messages}, key=key)
    assert c.status_code == 200
    counted = [rec for rec in upstream.requests if rec.path.endswith("count_tokens")][-1].json()["messages"]
    assert counted == upstream.messages_requests()[0].json()["messages"]


async def _count(rec):
    return fake.count_answer(rec)


@pytest.mark.parametrize(
    "config, param",
    [
        (edit(trigger={"type": "input_tokens", "value": "2000"}), "context_management.edits[0].trigger.value"),
        (edit(trigger={"type": "input_tokens", "value": 2000.5}), "context_management.edits[0].trigger.value"),
        (edit(trigger={"type": "input_tokens", "value": -1}), "context_management.edits[0].trigger.value"),
        (edit(trigger={"type": "input_tokens", "value": None}), "context_management.edits[0].trigger.value"),
        (edit(trigger={"type": "tool_uses", "value": 3}), "context_management.edits[0].trigger"),
        (edit(trigger=[1000]), "context_management.edits[0].trigger"),
        (edit(pause_after_compaction="yes"), "context_management.edits[0].pause_after_compaction"),
        (edit(instructions=42), "context_management.edits[0].instructions"),
        ({"edits": [{"type": "compact_20260112"}] * 10_000}, "context_management.edits"),
        ({"edits": [{"type": "compact_20260112"}, {"type": "compact_20260112"}]}, "context_management.edits[1]"),
        ({"edits": "compact"}, "context_management.edits"),
        ([{"type": "compact_20260112"}], "context_management"),
    ],
)
def test_malformed_edits_are_a_400(proxy_url, upstream, key, config, param):
    r = post(
        proxy_url,
        "/v1/messages",
        body={"max_tokens": 512, "model": MODEL, "messages": HISTORY, "context_management": config},
        key=key,
    )
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    assert param in r.json()["error"]["message"]
    assert not upstream.requests


@pytest.mark.parametrize(
    "block, why",
    [
        ({"type": "compaction", "content": {"text": "x"}}, "not a string"),
        ({"type": "compaction", "content": ["x"]}, "not a string"),
        ({"type": "compaction", "content": "x", "encrypted_content": 7}, "not a string"),
        ({"type": "compaction", "content": "x", "encrypted_content": "offload-compaction-v1:AAAA"}, "compaction"),
        ({"type": "compaction", "content": ""}, "empty"),
    ],
)
def test_a_malformed_block_is_a_400(proxy_url, upstream, key, block, why):
    messages = [*HISTORY, {"role": "assistant", "content": [block]}, {"role": "user", "content": "next"}]
    r = post(proxy_url, "/v1/messages", body={"max_tokens": 512, "model": MODEL, "messages": messages}, key=key)
    assert r.status_code == 400, r.text
    assert why in r.json()["error"]["message"] and not upstream.requests


def test_a_50_mb_block_is_forwarded_as_text_within_the_body_limit(proxy_url, upstream, key):
    huge = "summary line of the earlier work\n" * (50 * 1024 * 1024 // 33)
    messages = [
        {"role": "assistant", "content": [{"type": "compaction", "content": huge}]},
        {"role": "user", "content": "next"},
    ]
    r = post(
        proxy_url,
        "/v1/messages",
        body={"max_tokens": 512, "model": MODEL, "messages": messages},
        key=key,
        headers={"X-Offload-Mode": "off"},
    )
    assert r.status_code in (200, 413), r.text[:300]
    if r.status_code == 200:
        sent = upstream.messages_requests()[0].json()["messages"]
        assert sent[0]["content"][0]["text"] == huge and sent[-1]["content"] == "next"


def test_a_null_block_is_a_no_op(proxy_url, upstream, key):
    messages = [
        *HISTORY,
        {"role": "assistant", "content": [{"type": "compaction", "content": None}, {"type": "text", "text": "Fixed."}]},
        {"role": "user", "content": "next"},
    ]
    r = post(
        proxy_url,
        "/v1/messages",
        body={"max_tokens": 512, "model": MODEL, "messages": messages},
        key=key,
        headers={"X-Offload-Mode": "off"},
    )
    assert r.status_code == 200, r.text
    assert upstream.messages_requests()[0].json()["messages"] == [
        *HISTORY,
        {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]},
        {"role": "user", "content": "next"},
    ]


def test_relayed_to_a_native_upstream_everything_goes_on_byte_for_byte(proxy_url, upstream, key):
    upstream.handler = scripted(lambda rec: fake.native_answer(rec) or fake.answer(rec, fake.message(fake.text("Hi"))))
    body = {"max_tokens": 512, "model": MODEL, "messages": HISTORY, "context_management": edit()}
    raw = json.dumps(body, separators=(",", ":")).encode()
    r = httpx2.post(
        f"{proxy_url}/v1/messages",
        content=raw,
        timeout=30,
        headers={
            "x-api-key": key,
            "anthropic-version": "2023-06-01",
            "anthropic-beta": BETA,
            "content-type": "application/json",
            "X-Offload-Context-Management": "relay",
            "X-Offload-Mode": "off",
            "X-Offload-Cache-Control": "off",
        },
    )
    assert r.status_code == 200 and r.json()["content"][0] == fake.COMPACTION_BLOCK
    forwarded = upstream.messages_requests()[0]
    assert forwarded.body == raw and forwarded.headers["anthropic-beta"] == BETA
