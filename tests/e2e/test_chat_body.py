"""Chat bodies are checked where the proxy reads them: 400 naming the field, never a 500 or a
silently mangled body (see proxy/formats/chat.py for the rule)."""

from __future__ import annotations

import copy
import json

import httpx2
import pytest

from proxy.errors import ProxyError
from proxy.formats.chat import parse_chat_body
from proxy.formats.json_body import MAX_DEPTH
from proxy.http.error_map import body_of, status_of
from tests.harness.history import agent_history

HEADERS = {"authorization": "Bearer sk-body", "X-Offload-Max-Total-Tokens": "1000"}


def history_with(change) -> dict:
    """A body whose history is large enough to be offloaded, with one field made wrong."""
    body = {"model": "gpt-4o", "messages": agent_history(steps=4)}
    change(body)
    return body


def set_path(path: list, value: object):
    def change(body: dict) -> None:
        target = body
        for step in path[:-1]:
            target = target[step]
        if path[-1] is None:
            target.append(value)
        else:
            target[path[-1]] = value

    return change


# (what is changed, the param the 400 must name)
INVALID = [
    (set_path(["messages", 2, "tool_calls"], 5), "messages[2].tool_calls"),
    (set_path(["messages", 2, "tool_calls"], "call_0"), "messages[2].tool_calls"),
    (set_path(["messages", 2, "tool_calls", 0], "call_0"), "messages[2].tool_calls[0]"),
    (set_path(["messages", 3, "tool_call_id"], ["call_0"]), "messages[3].tool_call_id"),
    (set_path(["messages", 2, "tool_calls", 0, "id"], ["call_0"]), "messages[2].tool_calls[0].id"),
    (set_path(["messages", 2, "tool_calls", 0, "function"], "bash"), "messages[2].tool_calls[0].function"),
    (
        set_path(["messages", 2, "tool_calls", 0, "function", "name"], ["context_reload"]),
        "messages[2].tool_calls[0].function.name",
    ),
    (
        set_path(["messages", 2, "tool_calls", 0, "function", "arguments"], {"cmd": "ls"}),
        "messages[2].tool_calls[0].function.arguments",
    ),
    (set_path(["tools"], 5), "tools"),
    (set_path(["tools"], "abc"), "tools"),
    (set_path(["tools"], ["abc"]), "tools[0]"),
    (set_path(["messages", 3], 5), "messages[3]"),
    (set_path(["messages", None], "hello"), "messages[10]"),
    (set_path(["messages"], "hello"), "messages"),
    (set_path(["messages", 1, "role"], 7), "messages[1].role"),
    (set_path(["messages", 3, "content"], 5), "messages[3].content"),
    (set_path(["messages", 3, "content"], [{"type": "text", "text": 5}]), "messages[3].content[0].text"),
    (set_path(["messages", 3, "content"], ["plain string part"]), "messages[3].content[0]"),
    (set_path(["stream"], "yes"), "stream"),
]


@pytest.mark.parametrize("change,param", INVALID)
def test_wrong_shapes_are_400_naming_the_field(change, param):
    raw = json.dumps(history_with(change)).encode()
    with pytest.raises(ProxyError) as info:
        parse_chat_body(raw)
    assert (status_of(info.value), body_of(info.value)["error"]["type"], info.value.code, info.value.param) == (
        400,
        "invalid_request_error",
        "invalid_type",
        param,
    )
    assert param in info.value.message


def nested_body(levels: int, where: str) -> bytes:
    """A chat body `levels` deep in all (the body itself is level 1), nested in `where`."""
    if where == "metadata":
        n = levels - 1
        return b'{"model":"gpt-4o","messages":[],"metadata":' + b"[" * n + b"]" * n + b"}"
    n = levels - 3
    return b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi","x":' + b"[" * n + b"]" * n + b"}]}"


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 1100, 2000, 100_000])
@pytest.mark.parametrize("where", ["metadata", "messages"])
def test_deep_nesting_is_invalid_json(levels, where):
    with pytest.raises(ProxyError) as info:
        parse_chat_body(nested_body(levels, where))
    assert (status_of(info.value), info.value.code) == (400, "invalid_json")


@pytest.mark.parametrize("where", ["metadata", "messages"])
def test_nesting_up_to_the_limit_is_accepted(where):
    assert parse_chat_body(nested_body(MAX_DEPTH, where))["model"] == "gpt-4o"


def test_accepted_shapes_are_returned_untouched():
    body = history_with(lambda b: None)
    body.update(tools=None, stream=None, response_format={"type": "text"})
    body["messages"][2].update(function_call=None, refusal=None)
    body["messages"][3]["name"] = None
    body["messages"].append({"role": "assistant", "content": None, "tool_calls": None})
    body["messages"].append(
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:x"}}],
        }
    )
    body["messages"].append({"content": "no role: the upstream's call", "weird": {"a": [1, 2]}})
    raw = json.dumps(body).encode()
    assert parse_chat_body(raw) == json.loads(raw)


@pytest.mark.parametrize("change,param", INVALID)
def test_proxy_answers_400_and_sends_nothing_upstream(proxy_url, upstream, change, param):
    body = history_with(change)
    for route in ("/v1/chat/completions", "/v1/offload"):
        r = httpx2.post(f"{proxy_url}{route}", content=json.dumps(body), headers=HEADERS, timeout=20)
        assert r.status_code == 400, (route, r.status_code, r.text)
        assert r.json() == {
            "error": {
                "message": r.json()["error"]["message"],
                "type": "invalid_request_error",
                "param": param,
                "code": "invalid_type",
            }
        }
    assert upstream.requests == []


@pytest.mark.parametrize("levels", [200, 1000, 2000])
def test_deeply_nested_bodies_are_400_not_500(proxy_url, upstream, levels):
    messages = json.dumps(agent_history(steps=4)).encode()
    raw = b'{"model":"gpt-4o","messages":' + messages + b',"metadata":' + b"[" * levels + b"]" * levels + b"}"
    for route in ("/v1/chat/completions", "/v1/offload"):
        r = httpx2.post(f"{proxy_url}{route}", content=raw, headers=HEADERS, timeout=20)
        assert r.status_code == 400, (route, r.status_code, r.text[:300])
        assert r.json()["error"]["code"] == "invalid_json"
    assert upstream.requests == []


def test_null_optional_fields_still_offload(proxy_url, upstream):
    body = history_with(lambda b: b.update(tools=None, stream=None))
    body["messages"][2]["function_call"] = None
    original = copy.deepcopy(body)
    r = httpx2.post(f"{proxy_url}/v1/chat/completions", content=json.dumps(body), headers=HEADERS, timeout=20)
    assert r.status_code == 200, r.text
    assert r.headers["x-offload-action"] != "none"
    sent = upstream.chat_requests()[-1].json()
    assert sent["stream"] is None and sent["messages"][2] == original["messages"][2]
    assert [t["function"]["name"] for t in sent["tools"]] == ["context_reload", "context_search"]
