"""A lone surrogate escaped in request JSON ("\\ud83d", common in truncated tool output) goes
upstream escaped the same way: always valid UTF-8, decoding to the same string."""

from __future__ import annotations

import json

import httpx2
from starlette.responses import JSONResponse

from proxy.core import jsonio
from tests.harness.history import agent_history, refs_sent
from tests.harness.servers import completion, scripted, tool_call

LONE = "\ud83d"  # the first half of 😀, cut off


def test_dumps_escapes_lone_surrogates_only():
    value = {"t": f"caf\u00e9 {LONE} x \U0001f600 \udc00", "n": 2**70}
    out = jsonio.dumps(value)
    assert out == '{"t":"caf\u00e9 \\ud83d x \U0001f600 \\udc00","n":1180591620717411303424}'.encode()
    assert json.loads(out.decode("utf-8")) == value
    assert json.loads(jsonio.dumps(value, sort_keys=True).decode("utf-8")) == value
    assert jsonio.loads(jsonio.dumps(value)) == value


def surrogate_history() -> list[dict]:
    messages = agent_history(steps=3, lines=120)
    for m in messages:
        if m["role"] == "tool":
            m["content"] = m["content"].replace("line 5:", f"line 5: truncated {LONE}", 1)
    messages.append({"role": "user", "content": f"and this {LONE} stays in place"})
    return messages


def test_rewritten_body_is_valid_utf8_and_reload_is_exact(proxy_url, upstream):
    messages = surrogate_history()
    body = json.dumps({"model": "gpt-4o", "messages": messages})  # escapes the lone surrogates
    assert "\\ud83d" in body

    def reload_first(rec):
        return JSONResponse(
            completion(None, tool_calls=[tool_call("context_reload", {"ref": refs_sent(rec)[0]}, id="call_r")])
        )

    upstream.handler = scripted(reload_first, lambda rec: JSONResponse(completion("done")))
    r = httpx2.post(
        f"{proxy_url}/v1/chat/completions",
        content=body.encode("ascii"),
        timeout=20,
        headers={
            "authorization": "Bearer sk-surrogate",
            "content-type": "application/json",
            "X-Offload-Max-Total-Tokens": "100",
            "X-Offload-Max-Tool-Message-Tokens": "200",
            "X-Offload-Mode": "compact",
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "done"
    first, second = upstream.chat_requests()
    for rec in (first, second):
        text = rec.body.decode("utf-8")  # strict: no invalid UTF-8 on the wire
        assert "\\ud83d" in text
    sent = json.loads(first.body.decode("utf-8"))["messages"]
    assert sent[-1] == messages[-1]  # not offloaded: the same string, lone surrogate included
    ref = refs_sent(first)[0]
    original = next(m["content"] for m, s in zip(messages, sent) if f"ref={ref}" in str(s["content"]))
    assert LONE in original
    reload_result = json.loads(second.body.decode("utf-8"))["messages"][-1]
    assert reload_result["role"] == "tool" and reload_result["tool_call_id"] == "call_r"
    assert reload_result["content"] == original  # byte for byte, the lone surrogate escaped as it came


def test_direct_api_answers_with_lone_surrogates(proxy_url, upstream):
    messages = surrogate_history()
    body = json.dumps({"model": "gpt-4o", "messages": messages})
    headers = {
        "authorization": "Bearer sk-surrogate-api",
        "X-Offload-Max-Total-Tokens": "100",
        "X-Offload-Max-Tool-Message-Tokens": "200",
        "X-Offload-Mode": "compact",
    }
    r = httpx2.post(f"{proxy_url}/v1/offload", content=body, headers=headers, timeout=20)
    assert r.status_code == 200, r.text
    reduced = json.loads(r.content.decode("utf-8"))
    assert reduced["messages"][-1] == messages[-1] and reduced["refs"]
    ref = reduced["refs"][0]["ref"]
    original = next(m["content"] for m, s in zip(messages, reduced["messages"]) if f"ref={ref}" in str(s["content"]))
    got = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers=headers, timeout=20)
    assert got.status_code == 200, got.text
    assert json.loads(got.content.decode("utf-8"))["content"] == original
