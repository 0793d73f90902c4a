"""The summary request of each wire format (`--summary-request prefix`): the turn's own tools and
leading items byte for byte, then the instruction; and how its answer is read."""

from __future__ import annotations

import json

import httpx2
import pytest

from proxy.config import ServerSettings
from proxy.core.texts import RELOAD_TOOL_SCHEMAS, SUMMARY_INSTRUCTION
from proxy.formats.chat import CHAT
from proxy.formats.responses import RESPONSES
from proxy.offload.summarizer import SummaryFailed, summarize_prefix
from proxy.upstream.client import Upstream

TOOL = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}
CHAT_BODY = {
    "model": "gpt-4o",
    "stream": True,
    "stream_options": {"include_usage": True},
    "n": 2,
    "temperature": 0.2,
    "max_completion_tokens": 100,
    "response_format": {"type": "json_object"},
    "logprobs": True,
    "top_logprobs": 3,
    "stop": ["\n"],
    "tool_choice": "required",
    "parallel_tool_calls": False,
    "prompt_cache_key": "conv-1",
    "reasoning_effort": "low",
    "store": True,
    "metadata": {"a": "b"},
    "tools": [TOOL],
    "messages": [
        {"role": "system", "content": "You are a coder."},
        {"role": "user", "content": "Fix the bug."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "[offloaded tool result: ref=abc]"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Now the tests."},
    ],
}
INSTRUCTION_MESSAGE = {"role": "user", "content": SUMMARY_INSTRUCTION}


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False)


@pytest.mark.parametrize("injected", [True, False])
def test_chat_summary_request_starts_with_the_turns_messages_and_tools(injected):
    turn = CHAT.rounds(CHAT_BODY, CHAT_BODY["messages"], RELOAD_TOOL_SCHEMAS, extra_usage=None).request(injected)
    cut = 5
    endpoint, body = CHAT.summary_request(
        CHAT_BODY,
        turn["messages"][:cut],
        SUMMARY_INSTRUCTION,
        tools=RELOAD_TOOL_SCHEMAS if injected else (),
        model="gpt-4o",
    )
    assert endpoint == "chat/completions"
    assert dumps(body["messages"][:cut]) == dumps(turn["messages"][:cut])
    assert body["messages"][cut:] == [INSTRUCTION_MESSAGE]
    assert dumps(body["tools"]) == dumps(turn["tools"])
    assert (body["tool_choice"], body["stream"]) == ("none", False)
    for gone in (
        "stream_options",
        "n",
        "max_completion_tokens",
        "response_format",
        "logprobs",
        "top_logprobs",
        "stop",
        "store",
        "metadata",
    ):
        assert gone not in body, gone
    # what is part of the prompt or routes it to the cache stays as the turns send it
    assert (body["temperature"], body["prompt_cache_key"], body["reasoning_effort"]) == (0.2, "conv-1", "low")


def test_chat_summary_request_model_and_no_tools():
    bare = {"model": "gpt-4o", "messages": CHAT_BODY["messages"][:2], "tool_choice": "auto"}
    _, body = CHAT.summary_request(bare, bare["messages"], SUMMARY_INSTRUCTION, tools=(), model="gpt-4o-mini")
    assert body["model"] == "gpt-4o-mini" and "tools" not in body
    assert "tool_choice" not in body  # refused without tools
    legacy = {**bare, "functions": [{"name": "f", "parameters": {}}], "function_call": "auto"}
    _, body = CHAT.summary_request(legacy, bare["messages"], SUMMARY_INSTRUCTION, tools=(), model="gpt-4o")
    assert body["functions"] == legacy["functions"] and body["function_call"] == "none"


RESPONSES_BODY = {
    "model": "gpt-5",
    "instructions": "You are Codex.",
    "stream": True,
    "store": True,
    "background": True,
    "previous_response_id": "resp_1",
    "conversation": "conv_1",
    "max_output_tokens": 50,
    "text": {"format": {"type": "json_schema", "name": "x", "schema": {}}, "verbosity": "low"},
    "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "shell"}]},
    "reasoning": {"effort": "high"},
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "k",
    "tools": [
        {"type": "function", "name": "shell", "parameters": {"type": "object"}, "strict": False},
        {"type": "web_search"},
    ],
    "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "[offloaded tool result: ref=abc]"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And the tests?"}]},
    ],
}


@pytest.mark.parametrize("injected", [True, False])
def test_responses_summary_request_starts_with_the_turns_items_and_tools(injected):
    turn = RESPONSES.rounds(RESPONSES_BODY, RESPONSES_BODY["input"], RELOAD_TOOL_SCHEMAS, extra_usage=None).request(
        injected
    )
    cut = 6
    endpoint, body = RESPONSES.summary_request(
        RESPONSES_BODY,
        turn["input"][:cut],
        SUMMARY_INSTRUCTION,
        tools=RELOAD_TOOL_SCHEMAS if injected else (),
        model="gpt-5",
    )
    assert endpoint == "responses"
    assert dumps(body["input"][:cut]) == dumps(turn["input"][:cut])
    assert body["input"][cut:] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": SUMMARY_INSTRUCTION}]}
    ]
    assert dumps(body["tools"]) == dumps(turn["tools"])
    assert body["instructions"] == "You are Codex."  # part of the cached prefix
    assert (body["tool_choice"], body["stream"], body["store"], body["background"]) == ("none", False, False, False)
    for gone in ("previous_response_id", "conversation", "max_output_tokens"):
        assert gone not in body, gone
    assert body["text"] == {"verbosity": "low"}
    assert body["reasoning"] == {"effort": "high"} and body["prompt_cache_key"] == "k"


def test_responses_summary_request_of_a_string_input():
    bare = {"model": "gpt-5", "input": "hello"}
    prefix = RESPONSES.history(bare)
    _, body = RESPONSES.summary_request(bare, prefix, SUMMARY_INSTRUCTION, tools=(), model="gpt-5-mini")
    assert body["input"][0] == {"role": "user", "content": "hello"} and len(body["input"]) == 2
    assert body["model"] == "gpt-5-mini" and "tools" not in body and "tool_choice" not in body


SNAPSHOT = "<state_snapshot><task_overview>fix</task_overview></state_snapshot>"


def test_answers_are_read_per_format():
    chat = {
        "choices": [{"message": {"role": "assistant", "content": "Here:\n" + SNAPSHOT}}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 40},
    }
    assert CHAT.summary_answer(chat) == ("Here:\n" + SNAPSHOT, 900, 40)
    parts = {"choices": [{"message": {"content": [{"type": "text", "text": SNAPSHOT}]}}]}
    assert CHAT.summary_answer(parts) == (SNAPSHOT, 0, 0)
    responses = {
        "output": [
            {"type": "reasoning", "summary": []},
            {
                "type": "message",
                "content": [{"type": "output_text", "text": SNAPSHOT}, {"type": "refusal", "refusal": "no"}],
            },
        ],
        "usage": {"input_tokens": 1200, "output_tokens": 50},
    }
    assert RESPONSES.summary_answer(responses) == (SNAPSHOT, 1200, 50)
    for broken in (None, [], {"choices": []}, {"choices": [{"message": "x"}]}, "text"):
        with pytest.raises(ValueError):
            CHAT.summary_answer(broken)
    for broken in (None, {"output": "x"}, {}, []):
        with pytest.raises(ValueError):
            RESPONSES.summary_answer(broken)


def upstream_answering(status: int, content: bytes, seen: list) -> Upstream:
    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(status, content=content, headers={"content-type": "application/json"})

    return Upstream(ServerSettings(upstream="http://upstream.invalid/v1"), transport=httpx2.MockTransport(handler))


@pytest.mark.anyio
@pytest.mark.parametrize(
    "fmt, answer",
    [
        (
            CHAT,
            {"choices": [{"message": {"content": SNAPSHOT}}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
        ),
        (
            RESPONSES,
            {
                "output": [{"type": "message", "content": [{"type": "output_text", "text": SNAPSHOT}]}],
                "usage": {"input_tokens": 7, "output_tokens": 3},
            },
        ),
    ],
)
async def test_a_prefix_summary_goes_to_the_formats_endpoint_and_is_parsed(fmt, answer):
    seen: list = []
    upstream = upstream_answering(200, json.dumps(answer).encode(), seen)
    history = CHAT_BODY["messages"] if fmt is CHAT else RESPONSES_BODY["input"]
    request = fmt.summary_request({"model": "m"}, history[:2], SUMMARY_INSTRUCTION, tools=(), model="m")
    summary = await summarize_prefix(
        upstream,
        [(b"authorization", b"Bearer sk-mine")],
        request,
        read=fmt.summary_answer,
        timeout=5.0,
        base="http://tenant.invalid/v1",
    )
    assert (summary.text, summary.tokens_in, summary.tokens_out) == (SNAPSHOT, 7, 3)
    assert str(seen[0].url) == f"http://tenant.invalid/v1/{fmt.endpoint}"
    assert seen[0].headers["authorization"] == "Bearer sk-mine"
    await upstream.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("fmt", [CHAT, RESPONSES])
@pytest.mark.parametrize(
    "status, content, why",
    [
        (
            200,
            json.dumps(
                {
                    "choices": [{"message": {"content": "no block"}}],
                    "output": [{"type": "message", "content": [{"type": "output_text", "text": "no block"}]}],
                }
            ),
            "no <state_snapshot>",
        ),
        (200, b"<html>gateway</html>", "unusable body"),
        (200, b'{"choices": 5, "output": 5}', "unusable body"),
        (200, b"[" * 5000 + b"]" * 5000, "unusable body"),
        (500, b'{"error": {"message": "down"}}', "answered 500"),
    ],
)
async def test_a_missing_block_or_a_broken_answer_is_a_summary_failure(fmt, status, content, why):
    upstream = upstream_answering(status, content if isinstance(content, bytes) else content.encode(), [])
    request = fmt.summary_request({"model": "m"}, [], SUMMARY_INSTRUCTION, tools=(), model="m")
    with pytest.raises(SummaryFailed, match=why):
        await summarize_prefix(upstream, [], request, read=fmt.summary_answer, timeout=5.0)
    await upstream.aclose()
