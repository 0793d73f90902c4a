"""Type confusion in the fields the proxy reads: a 400 `invalid_type` naming the field, in the
endpoint's own error shape, never a 500. The cases an attack review found (each a plain-text
500 before the body checks covered every field the proxy reads); `test_type_fuzz` covers the rest."""

from __future__ import annotations

import uuid

import httpx2
import pytest

from tests.e2e.test_anthropic_compression import INLINE, conversation
from tests.harness.requests import post
from tests.harness.responses import function_call, function_call_output

BIG = "\n".join(f"line {i}: " + "lorem ipsum dolor sit amet " * 3 for i in range(600))
OFFLOAD = {"X-Offload-Max-Total-Tokens": "1000", "X-Offload-Max-Tool-Message-Tokens": "500"}


def new_key(path: str) -> str:
    """A tenant of the request's own, in its API's spelling."""
    return f"sk-ant-{uuid.uuid4().hex}" if path.startswith("/v1/messages") else f"sk-{uuid.uuid4().hex}"


def openai_invalid_type(r: httpx2.Response, param: str) -> None:
    assert r.status_code == 400, (r.status_code, r.text[:300])
    error = r.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "invalid_type", param), error


def anthropic_invalid_type(r: httpx2.Response, param: str) -> None:
    assert r.status_code == 400, (r.status_code, r.text[:300])
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    assert f"'{param}'" in body["error"]["message"], body


def responses_history(*extra: dict) -> list[dict]:
    """A turn whose large tool output is offloaded (so the reload tools are injected)."""
    return [
        {"role": "user", "content": "Why did it fail?"},
        function_call("read_logs", {}, call_id="call_1", id="fc_1"),
        function_call_output("call_1", BIG),
        *extra,
        {"role": "user", "content": "Summarise."},
    ]


def test_chat_part_with_an_unhashable_type(proxy_url, upstream):
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": [1]}]}]}
    r = post(proxy_url, "/v1/chat/completions", body=body, key=new_key("/v1/chat/completions"))
    openai_invalid_type(r, "messages[0].content[0].type")
    assert not upstream.requests


@pytest.mark.parametrize(
    "item,param",
    [
        ({"role": "user", "content": "hi", "tool_calls": True}, "input[0].tool_calls"),
        ({"role": "user", "content": [{"type": [1]}]}, "input[0].content[0].type"),
        ({"type": "computer_call_output", "call_id": "c", "output": {"type": [1]}}, "input[0].output.type"),
    ],
    ids=["message-tool-calls", "part-type", "computer-output-type"],
)
def test_responses_items_of_the_wrong_type(proxy_url, upstream, item, param):
    r = post(proxy_url, "/v1/responses", body={"model": "gpt-5", "input": [item]}, key=new_key("/v1/responses"))
    openai_invalid_type(r, param)
    assert not upstream.requests


def test_responses_tool_name_on_a_turn_with_reload_tools(proxy_url, upstream):
    body = {
        "model": "gpt-5",
        "input": responses_history(),
        "tools": [{"type": "function", "name": [1], "parameters": {"type": "object"}}],
    }
    openai_invalid_type(
        post(proxy_url, "/v1/responses", body=body, key=new_key("/v1/responses"), headers=OFFLOAD), "tools[0].name"
    )
    assert not upstream.requests


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_messages_message_with_tool_calls(proxy_url, upstream, path):
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi", "tool_calls": 5}],
    }
    anthropic_invalid_type(post(proxy_url, path, body=body, key=new_key(path)), "messages[0].tool_calls")
    assert not upstream.requests


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_messages_tool_choice_type_on_a_turn_summarised_inline(proxy_url, upstream, path):
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": conversation(8),
        "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": [1]},
    }
    anthropic_invalid_type(post(proxy_url, path, body=body, key=new_key(path), headers=INLINE), "tool_choice.type")
    assert not upstream.requests
