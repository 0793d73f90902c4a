"""A call to an injected tool whose arguments nest 200,000 levels deep (the model's choice, in
every wire format, streamed and not) is answered to the model like any bad argument: the
round goes on, the client gets an ordinary 200 answer, and nothing fails with a traceback."""

from __future__ import annotations

import json
import logging

import pytest
from starlette.responses import JSONResponse, Response, StreamingResponse

from tests.harness import anthropic as fake_anthropic
from tests.harness import responses as fake_responses
from tests.harness.history import agent_history
from tests.harness.requests import post
from tests.harness.servers import completion, scripted, stream_chunks

LEVELS = 200_000
DEEP = "[" * LEVELS + "]" * LEVELS  # a valid JSON text, far past any parser's recursion
DEEP_OBJECT = '{"ref": ' + DEEP + "}"
TOLD = "Invalid arguments for context_reload: arguments nest deeper than 32 levels"
OPENAI_HEADERS = {
    "authorization": "Bearer sk-deep-args",
    "X-Offload-Max-Total-Tokens": "1000",
    "X-Offload-Max-Tool-Message-Tokens": "500",
}


@pytest.fixture
def no_traceback(caplog):
    caplog.set_level(logging.WARNING)
    yield
    failed = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not failed, [r.getMessage() for r in failed]


# ---------------------------------------------------------------- chat completions


def chat_first(stream: bool):
    call = {"id": "proxy_deep", "type": "function", "function": {"name": "context_reload", "arguments": DEEP_OBJECT}}

    def first(rec):
        if stream:
            return StreamingResponse(iter(stream_chunks("Looking.", tool_calls=[call])), media_type="text/event-stream")
        return JSONResponse(completion("Looking.", tool_calls=[call]))

    return first


def chat_final(rec):
    body = rec.json()
    if body.get("stream"):
        return StreamingResponse(iter(stream_chunks("Final answer.", id="chatcmpl-2")), media_type="text/event-stream")
    return JSONResponse(completion("Final answer."))


@pytest.mark.parametrize("stream", [False, True])
def test_chat(proxy_url, upstream, no_traceback, stream):
    upstream.handler = scripted(chat_first(stream), chat_final)
    r = post(
        proxy_url,
        "/v1/chat/completions",
        headers=OPENAI_HEADERS,
        body={"model": "gpt-4o", "messages": agent_history(steps=4), "stream": stream},
    )
    assert r.status_code == 200, r.text[:300]
    if stream:
        chunks = [
            json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"
        ]
        assert not [c for c in chunks if "error" in c] and r.text.rstrip().endswith("data: [DONE]")
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    else:
        text = r.json()["choices"][0]["message"]["content"]
    assert text.strip().endswith("Final answer.") and "context_reload" not in r.text
    first, second = upstream.chat_requests()
    told = second.json()["messages"][-1]
    assert told["role"] == "tool" and told["content"].startswith(TOLD), told["content"][:200]


# ---------------------------------------------------------------- Responses


@pytest.mark.parametrize("stream", [False, True])
def test_responses(proxy_url, upstream, no_traceback, stream):
    call = fake_responses.function_call("context_reload", DEEP_OBJECT, call_id="call_deep", id="fc_deep")
    upstream.handler = scripted(
        fake_responses.answering(call, id="resp_deep_1"),
        fake_responses.answering(fake_responses.message("Final answer."), id="resp_deep_2"),
    )
    body = {"model": "gpt-5", "input": agent_history(steps=4)[1:], "store": False, "stream": stream}
    r = post(proxy_url, "/v1/responses", body=body, headers=OPENAI_HEADERS)
    assert r.status_code == 200, r.text[:300]
    if stream:
        final = fake_responses.parse_sse(r.text)[-1]
        assert final["type"] == "response.completed", final
        output = final["response"]["output"]
    else:
        output = r.json()["output"]
    assert output[-1]["content"][0]["text"] == "Final answer." and "context_reload" not in r.text
    first, second = upstream.responses_requests()
    [told] = [
        i
        for i in fake_responses.input_items(second)
        if i.get("type") == "function_call_output" and i.get("call_id") == "call_deep"
    ]
    assert told["output"].startswith(TOLD), told["output"][:200]


# ---------------------------------------------------------------- Anthropic Messages

ANTHROPIC_HEADERS = {
    "x-api-key": "sk-ant-deep-args",
    "anthropic-version": "2023-06-01",
    "X-Offload-Max-Total-Tokens": "1000",
    "X-Offload-Max-Tool-Message-Tokens": "500",
}


def ev(kind: str, **data) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def messages_first_streamed(rec):
    """A tool_use whose input_json_delta fragments nest LEVELS deep, in a few pieces."""
    start = ev(
        "message_start",
        message={
            "id": "msg_deep_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-sonnet-4-5",
            "usage": {"input_tokens": 7, "output_tokens": 1},
        },
    )
    pieces = [DEEP_OBJECT[i : i + 100_000] for i in range(0, len(DEEP_OBJECT), 100_000)]
    block = {"type": "tool_use", "id": "toolu_deep", "name": "context_reload", "input": {}}
    return StreamingResponse(
        iter(
            [
                start,
                ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
                ev("content_block_delta", index=0, delta={"type": "text_delta", "text": "Looking."}),
                ev("content_block_stop", index=0),
                ev("content_block_start", index=1, content_block=block),
                *(
                    ev("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": p})
                    for p in pieces
                ),
                ev("content_block_stop", index=1),
                ev(
                    "message_delta",
                    delta={"stop_reason": "tool_use", "stop_sequence": None},
                    usage={"output_tokens": 9},
                ),
                ev("message_stop"),
            ]
        ),
        media_type="text/event-stream",
    )


# A non-streamed answer carries the input as an object, within the body: at most 1,000 levels
# are readable JSON (orjson's limit), and that is already too deep to write back out.
BODY_LEVELS = 1_000


def messages_first_json(rec):
    msg = fake_anthropic.message(
        fake_anthropic.text("Looking."), fake_anthropic.tool_use("context_reload", {"ref": "@@DEEP@@"}, id="toolu_deep")
    )
    nest = "[" * (BODY_LEVELS - 4) + "]" * (BODY_LEVELS - 4)
    return Response(json.dumps(msg).replace('"@@DEEP@@"', nest), media_type="application/json")


@pytest.mark.parametrize("stream", [False, True])
def test_messages(proxy_url, upstream, no_traceback, stream):
    def final(rec):
        return fake_anthropic.answer(rec, fake_anthropic.message(fake_anthropic.text("Final answer.")))

    upstream.handler = scripted(messages_first_streamed if stream else messages_first_json, final)
    history = [
        {"role": "user", "content": "Run it."},
        {"role": "assistant", "content": [fake_anthropic.tool_use("Bash", {"c": "x"}, id="toolu_big")]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_big", "content": agent_history(steps=1)[3]["content"]}
            ],
        },
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "What did it say?"},
    ]
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": history,
        "stream": stream,
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    }
    r = post(proxy_url, "/v1/messages", body=body, headers=ANTHROPIC_HEADERS)
    assert r.status_code == 200, r.text[:300]
    if stream:
        got = fake_anthropic.parse_sse(r.content)
        assert [e["type"] for e in got][-2:] == ["message_delta", "message_stop"], got[-3:]
        text = "".join(e["delta"].get("text", "") for e in got if e["type"] == "content_block_delta")
    else:
        text = "".join(b.get("text", "") for b in r.json()["content"])
    assert text.endswith("Final answer.") and "context_reload" not in r.text
    first, second = upstream.messages_requests()
    [told] = second.json()["messages"][-1]["content"]
    assert told["tool_use_id"] == "toolu_deep" and told["content"].startswith(TOLD), told["content"][:200]
